"""What the live pool's index holds per state copy: no prompt, no state, only where they are.

An :class:`Entry` is one copy of a state the pool could serve: a run's checkpoint, a
stored session state, or a line of a sealed session segment not stored yet. It keeps its
id, the 16-byte digest the export de-duplicates on, its place in the export's order, its
split, and its place (:class:`RunPlace`, :class:`StoredPlace`, :class:`SegmentPlace`) its
row is read from on demand.

:class:`Candidates` holds every entry and decides which copy of each state is served by
the export's own rules (``core.export.selection.CopyRules``): a run's state beats a
session's of its id or content, the earliest run (by natural name) keeps a duplicate, the
earliest session keeps a state two sessions share. Only entries that share an id or a
digest with a changed one are decided again: a refresh costs what changed, never the pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from ..core import AnyPath
from ..core.export import CopyRules, kept_alone
from ..core.segments import parse_segment_name
from ..core.store import part_version

RUN, STORED, SEGMENT = 0, 1, 2  # where a copy's row is read from

Span = tuple[int, int, int]  # a Parquet row: (row group, row in it, rows)


class RunPlace(NamedTuple):
    """Where a run state's row is: its prompt's and its state's part file and span, and the
    two rows' keys. The keys change with the row's content, the rest when parts merge."""

    prompts_file: str
    prompts_span: Span
    states_file: str
    states_span: Span
    state_key: str
    prompt_key: str


class StoredPlace(NamedTuple):
    """Where a stored session state's row is: its part (``stem``.parquet in the session's
    states and prompts), its row there, and its prompt's row (``None``: it has none)."""

    stem: str
    group: int
    row: int
    prompt: tuple[int, int] | None


class SegmentPlace(NamedTuple):
    """Where a sealed segment's state is: the segment file and the line's byte offset."""

    path: AnyPath
    offset: int


Place = RunPlace | StoredPlace | SegmentPlace


def _from_fields(cls: type[tuple]) -> Callable[[tuple], Any]:
    """``cls`` made from a tuple of its fields in C: a NamedTuple's own constructor takes its
    arguments in Python (several times a tuple's cost), and an open makes a place a state."""
    return partial(tuple.__new__, cls)


run_place = _from_fields(RunPlace)
stored_place = _from_fields(StoredPlace)
segment_place = _from_fields(SegmentPlace)


@dataclass(frozen=True)
class StateSource:
    """Where a served state comes from: a run's checkpoint, or a session's line written by a
    writer at a policy step."""

    run: str | None = None
    checkpoint: int | None = None
    session: str | None = None
    writer: str | None = None
    policy_step: int | None = None
    segment: str | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A run state's run and checkpoint, or a session state's session, writer, policy
        step and line."""
        if self.run is not None:
            return {"run": self.run, "checkpoint": self.checkpoint}
        return {"session": self.session, "writer": self.writer, "policy_step": self.policy_step,
                "segment": self.segment, "line": self.line}  # fmt: skip

    def describe(self) -> str:
        """One short line: ``run run000, checkpoint 2`` or ``session s, writer w, step 3``."""
        if self.run is not None:
            return f"run {self.run}, checkpoint {self.checkpoint}"
        step = "no step" if self.policy_step is None else f"step {self.policy_step}"
        return f"session {self.session}, writer {self.writer}, {step}"


class Entry:
    """One copy of a state: its identity, its export order and where its row is."""

    __slots__ = ("copy", "digest", "key", "kind", "ok", "sid", "split", "step", "weight", "where")

    def __init__(
        self,
        kind: int,
        copy: tuple,
        sid: str,
        digest: bytes,
        key: tuple,
        split: str,
        where: Place,
        step: int | None = None,
        ok: bool = True,
    ):
        self.kind, self.copy, self.sid, self.digest = kind, copy, sid, digest
        self.key, self.split, self.where, self.step, self.ok = key, split, where, step, ok
        self.weight: float | None = None

    @property
    def source(self) -> str:
        """The run or the session it belongs to."""
        return self.copy[0]

    @property
    def origin(self) -> StateSource:
        """The run's checkpoint, or the session, writer and policy step, it comes from."""
        if self.kind == RUN:
            return StateSource(run=self.copy[0], checkpoint=part_version(self.copy[1]))
        session, segment, line = self.copy
        parsed = parse_segment_name(segment)
        writer = None if parsed is None else parsed[0]
        return StateSource(
            session=session, writer=writer, policy_step=self.step, segment=segment, line=line
        )

    @property
    def row_key(self) -> tuple:
        """A version of the row: changes when its content may have (a run rebuilt), not
        when the row moves (parts merged) or a segment's state is stored by Dagster."""
        key = (self.copy, self.sid, self.digest, self.step)
        where = self.where
        if isinstance(where, RunPlace):
            return (*key, where.state_key, where.prompt_key)
        return key

    def __repr__(self) -> str:
        return f"Entry({self.sid!r}, kind={self.kind}, copy={self.copy!r})"


def _add(index: dict[Any, Any], key: Any, entry: Entry) -> None:
    held = index.get(key)
    if held is None:
        index[key] = entry
    elif isinstance(held, list):
        held.append(entry)
    else:
        index[key] = [held, entry]


def _remove(index: dict[Any, Any], key: Any, entry: Entry) -> None:
    held = index.get(key)
    if held is entry:
        del index[key]
    elif isinstance(held, list):
        held.remove(entry)
        if len(held) == 1:
            index[key] = held[0]


def _each(held: Any) -> Iterable[Entry]:
    if held is None:
        return ()
    return held if isinstance(held, list) else (held,)


class Candidates:
    """Every copy the pool knows, by copy, by state id and by digest; which copy wins."""

    def __init__(self) -> None:
        self.copies: dict[tuple, Entry] = {}
        self._by_sid: dict[str, Any] = {}
        self._by_digest: dict[bytes, Any] = {}
        self.winners: dict[str, Entry] = {}  # state id -> the copy the export would keep

    def __len__(self) -> int:
        return len(self.copies)

    def update(self, added: Iterable[Entry], removed: Iterable[tuple]) -> tuple[set[str], set[str]]:
        """Add entries (replacing a copy of the same key) and remove copies; then decide the
        affected states again. ``(state ids that won or changed copy, state ids that lost)``."""
        seeds_sid: set[str] = set()
        seeds_digest: set[bytes] = set()
        new: list[Entry] = []
        for copy in removed:
            old = self.copies.pop(copy, None)
            if old is not None:
                self._forget(old, seeds_sid, seeds_digest)
        for entry in added:
            old = self.copies.get(entry.copy)
            if old is not None:
                self._forget(old, seeds_sid, seeds_digest)
            self.copies[entry.copy] = entry
            _add(self._by_sid, entry.sid, entry)
            _add(self._by_digest, entry.digest, entry)
            new.append(entry)
        won: set[str] = set()
        for entry in new:  # most copies share neither id nor digest: decided alone
            alone = self._by_sid[entry.sid] is entry and self._by_digest[entry.digest] is entry
            if alone and kept_alone(entry.kind == RUN, entry.ok):
                if self.winners.get(entry.sid) is not entry:
                    self.winners[entry.sid] = entry
                    won.add(entry.sid)
            else:
                seeds_sid.add(entry.sid)
                seeds_digest.add(entry.digest)
        if not seeds_sid and not seeds_digest:
            return won, set()
        more, lost = self._decide(self._component(seeds_sid, seeds_digest), seeds_sid)
        return won | more, lost - more

    def _forget(self, old: Entry, seeds_sid: set[str], seeds_digest: set[bytes]) -> None:
        _remove(self._by_sid, old.sid, old)
        _remove(self._by_digest, old.digest, old)
        seeds_sid.add(old.sid)
        seeds_digest.add(old.digest)

    def _component(self, sids: set[str], digests: set[bytes]) -> list[Entry]:
        """Every entry linked to the seeds by a shared state id or digest."""
        found: dict[int, Entry] = {}
        todo_sid, todo_digest = list(sids), list(digests)
        done_sid, done_digest = set(sids), set(digests)
        while todo_sid or todo_digest:
            if todo_sid:
                held = self._by_sid.get(todo_sid.pop())
            else:
                held = self._by_digest.get(todo_digest.pop())
            for entry in _each(held):
                if id(entry) in found:
                    continue
                found[id(entry)] = entry
                if entry.sid not in done_sid:
                    done_sid.add(entry.sid)
                    todo_sid.append(entry.sid)
                if entry.digest not in done_digest:
                    done_digest.add(entry.digest)
                    todo_digest.append(entry.digest)
        return list(found.values())

    def _decide(self, component: list[Entry], seeds: set[str]) -> tuple[set[str], set[str]]:
        """The export's rules (:class:`CopyRules`) over one closed component, in its order."""
        rules = CopyRules(repeats=True)
        kept: dict[str, Entry] = {}
        for entry in sorted(component, key=lambda e: e.key):
            if entry.kind == RUN:
                if rules.run_copy(entry.sid, entry.digest) is None:
                    kept[entry.sid] = entry
            elif rules.session_state(entry.source, entry.sid, entry.digest, entry.ok):
                kept[entry.sid] = entry
        won, lost = set(), set()
        for sid in seeds | {e.sid for e in component}:
            old, new = self.winners.get(sid), kept.get(sid)
            if old is new:
                continue
            if new is None:
                del self.winners[sid]
                lost.add(sid)
            else:
                self.winners[sid] = new
                won.add(sid)
        return won, lost
