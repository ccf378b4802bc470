"""A served state's row, read on demand from where the index says it is.

A run state: its prompt's and its state's rows (one row group each, memory-mapped where
local), checked to be one version of the run (the prompt's ``state_key`` is the state's
``input_key`` the index recorded; else :class:`Stale`). A stored session state: its rows
in the session's parts. A segment's state: its line read again at its offset, parsed and
rendered as the ``session_states`` build does. The row is an :class:`ExportRow` built as
``export_rows`` builds it; nothing read is kept beyond a few open files.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.export.rows import NOT_RECORDED, SESSIONS, ExportRow
from ..core.export.sessions import NO_REFERENCE_JSON, _version
from ..core.locations import AnyPath
from ..core.names import PROMPTS, STATES
from ..core.prompts.spec import PromptSpec
from ..core.rejects import Reject
from ..core.segments.reader import DEFAULT_MAX_LINE, read_segment_line
from ..core.sessions.read import parse_line
from ..core.sessions.store import SessionFolders, session_prompt
from ..core.store.layout import StoreLayout
from .entries import RUN, STORED, Entry
from .runs import P_FILE, P_SPAN, S_FILE, S_KEY, S_SPAN
from .segments import display_name
from .stored import open_parquet

OPEN_FILES = 16  # Parquet files kept open (each holds its footer)
GROUPS_BYTES = 32 << 20  # row groups last read, kept for the next rows of the same group
PROMPT_COLUMNS = ["prompt", "reference_ops", "state_key"]
STATE_COLUMNS = ["version", "state", "reference_ops", "input_key"]


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

    def _file(self, path: AnyPath) -> pq.ParquetFile:
        parquet = self._open.pop(path, None)
        if parquet is None:
            if len(self._open) >= OPEN_FILES:
                with contextlib.suppress(Exception):
                    self._open.popitem(last=False)[1].close(force=True)
            parquet = open_parquet(path)
        self._open[path] = parquet
        return parquet

    def _group(self, path: AnyPath, group: int, columns: list[str]) -> pa.Table:
        """One row group (a few dozen checkpoints, or a session part's states), kept a while."""
        key = (path, group, tuple(columns))
        table = self._groups.pop(key, None)
        if table is None:
            parquet = self._file(path)
            table = parquet.read_row_group(group, columns=columns, use_threads=False)
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

    def _run(self, entry: Entry, index: int) -> ExportRow:
        run, where = entry.copy[0], entry.where
        prompts = self.layout.table(PROMPTS, run) / where[P_FILE]
        states = self.layout.table(STATES, run) / where[S_FILE]
        prompt_row = self._span(prompts, where[P_SPAN], PROMPT_COLUMNS)
        state_row = self._span(states, where[S_SPAN], STATE_COLUMNS)
        if not prompt_row["state_key"] == state_row["input_key"] == where[S_KEY]:
            self.drop(prompts)
            self.drop(states)
            raise Stale(f"run {run}: {entry.sid} was rebuilt")
        state = json.loads(state_row["state"])
        ops = state_row.get("reference_ops") or prompt_row.get("reference_ops")
        return ExportRow(
            index=index,
            split=entry.split,
            state_id=entry.sid,
            run=run,
            version=int(state_row["version"]),
            dataset=str(state.get("dataset", "")),
            prompt=prompt_row["prompt"],
            state=state_row["state"],
            reference_ops=ops or json.dumps(NOT_RECORDED),
            weight=entry.weight,
        )

    def _stored(self, entry: Entry, index: int) -> ExportRow:
        session = entry.copy[0]
        stem, group, at, prompt_at = entry.where
        if prompt_at is None:
            raise Stale(f"session {session}: {entry.sid} has no prompt")
        p_group, p_at = prompt_at
        folders = SessionFolders(self.store, session)
        states = folders.states / f"{stem}.parquet"
        state_row = self._span(states, (group, at, 1), ["state_id", "state"])
        prompt_row = self._span(
            folders.prompts / f"{stem}.parquet", (p_group, p_at, 1), ["state_id", "prompt"]
        )
        if not state_row["state_id"] == prompt_row["state_id"] == entry.sid:
            raise Stale(f"session {session}: {entry.sid} is no longer at its row")
        return self._session_row(entry, index, state_row["state"], prompt_row["prompt"])

    def _segment(self, entry: Entry, index: int) -> ExportRow:
        session, segment, line = entry.copy
        path, offset = entry.where
        try:
            raw = read_segment_line(path, offset, self.max_line)
        except FileNotFoundError:
            raise Stale(f"{display_name(session, segment)} is gone") from None
        item = parse_line(raw, line, display_name(session, segment), self.max_line)
        if isinstance(item, Reject) or item.state_id != entry.sid:
            raise Stale(f"{display_name(session, segment)} line {line} changed")
        return self._session_row(entry, index, item.text, session_prompt(item.state, self.spec))

    @staticmethod
    def _session_row(entry: Entry, index: int, text: str, prompt: str) -> ExportRow:
        state = json.loads(text)
        return ExportRow(
            index=index,
            split=entry.split,
            state_id=entry.sid,
            run=None,
            version=_version(state),
            dataset=str(state.get("dataset", "")),
            prompt=prompt,
            state=text,
            reference_ops=NO_REFERENCE_JSON,
            source=SESSIONS,
            session=entry.copy[0],
            policy_step=entry.step,
            weight=entry.weight,
        )
