"""The export's second source: each session's states paired with their prompts, streamed.

States and prompts are read with :func:`iter_session_table` (also public:
``from statepool_dagster import iter_session_table``), a few at a time, each state once. Both tables
list a session's states in the same order (segments by writer and number, lines in
order) and a prompt exists for every state whose rendering did not fail, so a merge
pairs them without holding either table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, forget_listing, is_local
from ..segments.naming import parse_segment_name
from ..sessions.build import session_totals
from ..sessions.store import SessionFolders
from ..states.digest import state_digest
from ..store.columns import column
from ..words import plural
from .gate import Gate
from .rows import ExportRow, ExportSet, session_row, split_of
from .selection import CopyRules

BATCH = 16  # states read at a time (a state may be tens of megabytes)


@dataclass(frozen=True)
class SessionItem:
    """One session state with its prompt (``None`` when its rendering was rejected)."""

    session: str
    state_id: str
    state: str
    prompt: str | None
    policy_step: int | None


def newest_step(store: str | os.PathLike[str], session: str) -> int | None:
    """The session's newest policy step, from its index (``None``: no state has one)."""
    steps = session_totals(store, session).policy_steps
    return None if steps is None else steps[1]


def _rows(store: str | os.PathLike[str], session: str, which: str, columns: list[str]):
    for batch in iter_session_table(store, session, which, columns, BATCH):
        yield from batch.to_pylist()


def session_items(store: str | os.PathLike[str], session: str) -> Iterator[SessionItem]:
    """Each state of ``session`` once, with its prompt, as it is read."""
    prompts = _rows(store, session, "prompts", ["state_id", "prompt"])
    head = next(prompts, None)
    passed: set[str] = set()
    for row in _rows(store, session, "states", ["state_id", "policy_step", "state"]):
        sid = row["state_id"]
        passed.add(sid)
        # A prompt whose state went by already (rendered in a later segment) is skipped.
        while head is not None and head["state_id"] != sid and head["state_id"] in passed:
            head = next(prompts, None)
        prompt = None
        if head is not None and head["state_id"] == sid:
            prompt = head["prompt"]
            head = next(prompts, None)
        yield SessionItem(session, sid, row["state"], prompt, row["policy_step"])


def _listed(ids: list[str], count: int, shown: int = 5) -> str:
    return ", ".join(ids[:shown]) + (f", … ({count} in all)" if count > shown else "")


class _Dropped:
    """States of one session left out for one reason: a count and the first few ids."""

    def __init__(self) -> None:
        self.count, self.ids = 0, []

    def add(self, state_id: str) -> None:
        self.count += 1
        if len(self.ids) < 5:
            self.ids.append(state_id)


class SessionRows:
    """Turns each session's states into export rows, after the runs' (``rules``: the copies
    kept so far; a run state wins): what :class:`~.selection.CopyRules` leaves out is named
    per session and reason."""

    def __init__(
        self, store: str | os.PathLike[str], export: ExportSet, gate: Gate, rules: CopyRules
    ):
        self.store, self.export, self.gate, self.rules = store, export, gate, rules
        self.dropped: dict[tuple[str, str], _Dropped] = {}  # (session, why) -> states

    def _drop(self, session: str, why: str, state_id: str) -> None:
        self.dropped.setdefault((session, why), _Dropped()).add(state_id)

    def read(self, session: str) -> Iterator[ExportRow]:
        """The session's rows; returns whether any state was collected (before the gate)."""
        export, rules = self.export, self.rules
        split = split_of(session, export.options)
        oldest = None
        if rules.max_staleness is not None:
            newest = newest_step(self.store, session)
            oldest = None if newest is None else newest - rules.max_staleness
        collected = False
        for item in session_items(self.store, session):
            sid = item.state_id
            why = rules.session_id(session, sid)
            if why is None:
                state = json.loads(item.state)
                why = rules.session_copy(
                    session,
                    sid,
                    state_digest(state),
                    prompt=item.prompt is not None,
                    policy_step=item.policy_step,
                    oldest=oldest,
                )
            if why is not None:
                self._drop(session, why, sid)
                continue
            collected = True
            export.collected += 1
            row = session_row(
                item.state,
                state,
                item.prompt,  # type: ignore[arg-type]
                index=self.gate.index.get(split, 0),
                split=split,
                session=session,
                state_id=sid,
                policy_step=item.policy_step,
            )
            del state
            row = self.gate.admit(row)
            if row is not None:
                yield row
        return collected

    def problems(self) -> list[str]:
        """One line per session and reason, naming the first states left out."""
        lines = []
        for (session, why), dropped in self.dropped.items():
            line = (
                f"session {session}: {plural(dropped.count, 'state')} {why} left out: "
                f"{_listed(dropped.ids, dropped.count)}"
            )
            if why.startswith("identical"):
                self.export.session_duplicates += dropped.count
                self.export.duplicate_notes.append(line)
            lines.append(line)
        return lines


def _parts(folder: AnyPath) -> list[AnyPath]:
    try:
        forget_listing(folder)
        names = [p.name for p in folder.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    keyed = []
    for name in names:
        parsed = parse_segment_name(name.removesuffix(".parquet") + ".jsonl")
        if parsed is not None and name.endswith(".parquet"):
            keyed.append((parsed, folder / name))
    return [path for _, path in sorted(keyed)]


def _batches(path: AnyPath, columns: list[str] | None, batch_size: int) -> Iterator[pa.RecordBatch]:
    handle = None if is_local(path) else path.open("rb")
    try:
        with pq.ParquetFile(path if handle is None else handle) as parquet:
            yield from parquet.iter_batches(batch_size=batch_size, columns=columns)
    finally:
        if handle is not None:
            handle.close()


def iter_session_table(
    store_root: str | os.PathLike[str] | AnyPath,
    session: str,
    which: str = "states",
    columns: list[str] | None = None,
    batch_size: int = 256,
) -> Iterator[pa.RecordBatch]:
    """Batches of a session's ``states`` (first copies only) or ``prompts``, each id once.

    Segments are read by writer, then number; a state written again in a later
    segment is left out (its provenance stays in the states parts).
    """
    folders = SessionFolders(store_root, session)
    folder = folders.states if which == "states" else folders.prompts
    wanted = None if columns is None else list(dict.fromkeys(["state_id", *columns]))
    if which == "states" and wanted is not None and "first_copy" not in wanted:
        wanted.append("first_copy")
    seen: set[str] = set()
    for path in _parts(folder):
        for batch in _batches(path, wanted, batch_size):
            ids = batch.column("state_id").to_pylist()
            firsts = batch.column("first_copy").to_pylist() if which == "states" else None
            keep = []
            for i, state_id in enumerate(ids):
                if (firsts is None or firsts[i]) and state_id not in seen:
                    seen.add(state_id)
                    keep.append(i)
            if keep:
                out = batch.take(column(keep, pa.int64()))
                if columns is not None:
                    out = out.select(columns)
                yield out
