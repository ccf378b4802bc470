"""A served state's row, read on demand from where the index says it is.

A run state: its prompt's and its state's rows (one row group each, memory-mapped where
local), checked to be one version of the run (the prompt's ``state_key`` is the state's
``input_key`` the index recorded; else :class:`Stale`). A stored session state: its rows
in the session's parts. A segment's state: its line read again at its offset, parsed and
rendered as the ``session_states`` build does. The row is an :class:`ExportRow` built as
``export_rows`` builds it; nothing read is kept beyond a few open files. Many rows are read
together by part file, row group and segment (:meth:`RowReader.read_many`).
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..core import RANGED_BLOCK, AnyPath, Reject, StatepoolError, storage_errors
from ..core.export import ExportRow, run_row, session_row
from ..core.names import PROMPTS, STATES
from ..core.prompts import PromptSpec
from ..core.segments import DEFAULT_MAX_LINE, open_segment, read_segment_line
from ..core.sessions import SessionFolders, parse_line, session_prompt
from ..core.store import StoreLayout
from .entries import RUN, SEGMENT, STORED, Entry
from .segments import display_name
from .stored import open_parquet
from .unavailable import at_once

OPEN_FILES = 16  # Parquet files kept open (each holds its footer)
GROUPS_BYTES = 32 << 20  # row groups last read, kept for the next rows of the same group
MAX_PATHS = 4096  # part files' paths kept made
PROMPT_COLUMNS_READ = ("prompt", "reference_ops", "state_key")
STATE_COLUMNS_READ = ("version", "state", "reference_ops", "input_key")


# What reading a part or a line no reader expects raises (Arrow's errors derive from these),
# and a segment state's prompt that no longer renders.
ROW_ERRORS = (ValueError, KeyError, TypeError, NotImplementedError, StatepoolError)


class Stale(Exception):
    """The index no longer says where the row is (a run rebuilt, a part gone): index again."""


class RowReader:
    """Reads an entry's row; keeps a few Parquet files open, least recently used closed."""

    def __init__(self, store: AnyPath, spec: PromptSpec, max_line: int = DEFAULT_MAX_LINE):
        self.layout = StoreLayout(store)
        self.store, self.spec, self.max_line = store, spec, max_line
        self._open: OrderedDict[AnyPath, pq.ParquetFile] = OrderedDict()
        self._groups: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._held = 0
        self._paths: dict[tuple[str, str, str], AnyPath] = {}
        # Runs one network fetch (a footer, a row group, segment lines); the live pool
        # bounds it by its deadline on an object store.
        self.fetch: Callable[..., Any] = at_once

    def _file(self, path: AnyPath) -> pq.ParquetFile:
        parquet = self._open.pop(path, None)
        if parquet is None:
            if len(self._open) >= OPEN_FILES:
                with contextlib.suppress(Exception):
                    self._open.popitem(last=False)[1].close(force=True)
            parquet = self.fetch(open_parquet, path)
        self._open[path] = parquet
        return parquet

    def _group(self, path: AnyPath, group: int, columns: list[str]) -> pa.Table:
        """One row group (a few dozen checkpoints, or a session part's states), kept a while."""
        key = (path, group, tuple(columns))
        table = self._groups.pop(key, None)
        if table is None:
            parquet = self._file(path)
            table = self.fetch(parquet.read_row_group, group, columns, False)
            self._held += table.nbytes
            while self._groups and self._held > GROUPS_BYTES:
                self._held -= self._groups.popitem(last=False)[1].nbytes
        self._groups[key] = table
        return table

    def _span(self, path: AnyPath, span: tuple, columns: list[str]) -> dict:
        group, offset, count = span
        try:
            table = self._group(path, group, columns)
            rows = table.slice(offset, 1 if count < 0 else count).to_pylist()
        except FileNotFoundError:
            raise Stale(str(path)) from None
        except OSError:
            self.drop(path)  # an open file may be a replaced one: opened again next time
            raise
        if len(rows) != 1:
            raise Stale(f"{path}: {len(rows)} rows at {span}")
        return rows[0]

    def drop(self, path: AnyPath | None = None) -> None:
        """Close one open file (``None``: all), e.g. one a rebuild replaced."""
        for key in [k for k in self._groups if path is None or k[0] == path]:
            self._held -= self._groups.pop(key).nbytes
        for key in [path] if path is not None else list(self._open):
            parquet = self._open.pop(key, None)
            if parquet is not None:
                with contextlib.suppress(Exception):
                    parquet.close(force=True)

    def read(self, entry: Entry, index: int) -> ExportRow:
        """The entry's row, at position ``index`` of its split."""
        if entry.kind == RUN:
            return self._run(entry, index)
        if entry.kind == STORED:
            return self._stored(entry, index)
        return self._segment(entry, index)

    def read_many(self, items: list[tuple[Entry, int]]) -> list[ExportRow | Exception]:
        """Each entry's row at its index (or why it could not be read), every row group and
        segment file asked for read once, in the order asked."""
        asks: dict[tuple, list[tuple[tuple[int, int], tuple]]] = {}
        lines: dict[AnyPath, list[tuple[int, int]]] = {}
        parts = []
        for k, (entry, _) in enumerate(items):
            if entry.kind == SEGMENT:
                lines.setdefault(entry.where.path, []).append((k, entry.where.offset))
                parts.append(1)
                continue
            spans = self._spans(entry)
            for part, (path, span, columns) in enumerate(spans):
                asks.setdefault((path, span[0], columns), []).append(((k, part), span))
            parts.append(len(spans))
        found = self._take(asks) | self._lines(lines)
        out: list[ExportRow | Exception] = []
        for k, (entry, index) in enumerate(items):
            got = [found[(k, part)] for part in range(parts[k])]
            problem = next((g for g in got if isinstance(g, Exception)), None)
            try:
                if problem is not None:
                    raise problem
                build = (self._run_row, self._stored_row, self._segment_row)[entry.kind]
                out.append(build(entry, index, *got))
            except (Stale, *ROW_ERRORS, *storage_errors()) as exc:  # the caller reads it alone
                out.append(exc)
        return out

    def _spans(self, entry: Entry) -> list[tuple[tuple[str, str, str], tuple, tuple[str, ...]]]:
        """Where an entry's two Parquet rows are: ``(place, (group, offset, count), columns)``
        (a place: table, run or session, file name; :meth:`_path` makes its path)."""
        if entry.kind == RUN:
            run, where = entry.copy[0], entry.where
            return [
                ((PROMPTS, run, where.prompts_file), where.prompts_span, PROMPT_COLUMNS_READ),
                ((STATES, run, where.states_file), where.states_span, STATE_COLUMNS_READ),
            ]
        if entry.kind == STORED:
            place = entry.where
            if place.prompt is None:
                return []
            session, name = entry.copy[0], f"{place.stem}.parquet"
            return [
                (("prompts", session, name), (*place.prompt, 1), ("state_id", "prompt")),
                (("states", session, name), (place.group, place.row, 1), ("state_id", "state")),
            ]
        return []

    def _path(self, place: tuple[str, str, str]) -> AnyPath:
        """A part file's path, made once (joining paths costs more than reading a row)."""
        path = self._paths.get(place)
        if path is None:
            if len(self._paths) >= MAX_PATHS:
                self._paths.clear()
            table, source, name = place
            if table in (PROMPTS, STATES):
                folder = self.layout.table(table, source)
            else:
                folder = getattr(SessionFolders(self.store, source), table)
            path = self._paths[place] = folder / name
        return path

    def _take(self, asks: dict[tuple, list]) -> dict[tuple, dict | Exception]:
        """The rows asked for, by (path, row group, columns): each group read once."""
        found: dict[tuple, dict | Exception] = {}
        for (place, group, columns), wanted in asks.items():
            path = self._path(place)
            try:
                table = self._group(path, group, list(columns))
            except FileNotFoundError:
                found.update((key, Stale(str(path))) for key, _ in wanted)
                continue
            except (*ROW_ERRORS, *storage_errors()) as exc:  # maybe a replaced file: reopened
                self.drop(path)
                found.update((key, exc) for key, _ in wanted)
                continue
            ok = [(key, s[1]) for key, s in wanted if (s[2] < 0 or s[2] == 1) and s[1] < len(table)]
            if len(ok) < len(wanted):
                found.update((key, Stale(f"{path}: no row at {span}")) for key, span in wanted)
            rows = _rows_at(table, [at for _, at in ok])
            found.update(zip([key for key, _ in ok], rows, strict=True))
        return found

    def _lines(self, asks: dict[AnyPath, list[tuple[int, int]]]) -> dict[tuple, bytes | Exception]:
        """Segment lines by (item, 0): each segment opened once, read in offset order."""
        found: dict[tuple, bytes | Exception] = {}
        for path, wanted in asks.items():
            try:
                found.update(self.fetch(_segment_lines, path, wanted, self.max_line))
            except storage_errors() as exc:  # gone, unreadable: each line read alone
                found.update(((k, 0), exc) for k, _ in wanted if (k, 0) not in found)
        return found

    def _run(self, entry: Entry, index: int) -> ExportRow:
        (prompts, p_span, p_columns), (states, s_span, s_columns) = self._spans(entry)
        prompts, states = self._path(prompts), self._path(states)
        prompt_row = self._span(prompts, p_span, list(p_columns))
        state_row = self._span(states, s_span, list(s_columns))
        try:
            return self._run_row(entry, index, prompt_row, state_row)
        except Stale:
            self.drop(prompts)
            self.drop(states)
            raise

    def _run_row(self, entry: Entry, index: int, prompt_row: dict, state_row: dict) -> ExportRow:
        run = entry.copy[0]
        if not prompt_row["state_key"] == state_row["input_key"] == entry.where.state_key:
            raise Stale(f"run {run}: {entry.sid} was rebuilt")
        return run_row(
            prompt_row,
            state_row,
            index=index,
            split=entry.split,
            state_id=entry.sid,
            run=run,
            weight=entry.weight,
        )

    def _stored(self, entry: Entry, index: int) -> ExportRow:
        rows = [self._span(self._path(p), span, list(cols)) for p, span, cols in self._spans(entry)]
        return self._stored_row(entry, index, *rows)

    def _stored_row(self, entry: Entry, index: int, *rows: dict) -> ExportRow:
        if not rows:
            raise Stale(f"session {entry.copy[0]}: {entry.sid} has no prompt")
        prompt_row, state_row = rows
        if not state_row["state_id"] == prompt_row["state_id"] == entry.sid:
            raise Stale(f"session {entry.copy[0]}: {entry.sid} is no longer at its row")
        return self._session_row(entry, index, state_row["state"], prompt_row["prompt"])

    def _segment(self, entry: Entry, index: int) -> ExportRow:
        place = entry.where
        try:
            raw = self.fetch(read_segment_line, place.path, place.offset, self.max_line)
        except FileNotFoundError:
            raise Stale(f"{display_name(*entry.copy[:2])} is gone") from None
        return self._segment_row(entry, index, raw)

    def _segment_row(self, entry: Entry, index: int, raw: bytes) -> ExportRow:
        session, segment, line = entry.copy
        item = parse_line(raw, line, display_name(session, segment), self.max_line)
        if isinstance(item, Reject) or item.state_id != entry.sid:
            raise Stale(f"{display_name(session, segment)} line {line} changed")
        return self._session_row(entry, index, item.text, session_prompt(item.state, self.spec))

    @staticmethod
    def _session_row(entry: Entry, index: int, text: str, prompt: str) -> ExportRow:
        return session_row(
            text,
            json.loads(text),
            prompt,
            index=index,
            split=entry.split,
            session=entry.copy[0],
            state_id=entry.sid,
            policy_step=entry.step,
            weight=entry.weight,
        )


def _rows_at(table: pa.Table, rows: list[int]) -> list[dict]:
    """These rows of a row group, as dicts: a slice where they lie close (no copy), else
    taken (``take`` copies each string it takes)."""
    if not rows:
        return []
    low, high = min(rows), max(rows)
    if high - low < 2 * len(rows):
        near = table.slice(low, high - low + 1).to_pylist()
        return [near[at - low] for at in rows]
    return table.take(rows).to_pylist()


def _segment_lines(
    path: AnyPath, wanted: list[tuple[int, int]], max_line: int
) -> dict[tuple, bytes]:
    """Lines of one segment by (item, 0), read in offset order from one open file."""
    found = {}
    with open_segment(path, block_size=RANGED_BLOCK) as f:
        for k, offset in sorted(wanted, key=lambda w: w[1]):
            f.seek(offset)
            found[(k, 0)] = f.readline(max_line + 1).rstrip(b"\r\n")
    return found
