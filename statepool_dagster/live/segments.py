"""Sealed session segments in the live pool's index, read straight from the sessions folder.

A segment is read once, when it is first listed sealed (``list_segments``: an unsealed
tail has a dot name and is never listed). Each line is validated as ``statepool ingest``
and the ``session_states`` build validate it (``parse_line``), its prompt rendered as
``session_prompts`` renders it (``session_prompt``), its digest computed; then only the
line's number and byte offset are kept. A bad line is a reject, kept in memory (readers
write nothing into the store) and logged naming the segment and line; it is never served.
A segment whose size or time changes (replaced by hand) is read again; one gone from a
session folder that is still there leaves the pool with its states.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import AnyPath, PromptInputError, Reject
from ..core.export import ExportOptions, split_of
from ..core.prompts import PromptSpec
from ..core.runs import natural_key
from ..core.segments import DEFAULT_MAX_LINE, Segment, iter_segment_records, list_segments
from ..core.sessions import (
    SEGMENTS_DIR,
    SessionState,
    parse_line,
    session_name_problem,
    session_prompt,
)
from ..core.states import state_text_digest
from .entries import SEGMENT, Entry, segment_place
from .stamps import subfolders
from .unavailable import at_once

log = logging.getLogger(__name__)

MAX_REJECTS = 10_000  # rejects kept for ``LivePool.rejects``; the rest are counted
MAX_LOGGED = 100  # rejects logged one by one


def display_name(session: str, segment: str) -> str:
    """How a segment is named in rejects, as the ``session_states`` build names it."""
    return f"{session}/segments/{segment}"


@dataclass
class Rejects:
    """The bad lines met so far (the first :data:`MAX_REJECTS`), and how many in all."""

    kept: list[Reject] = field(default_factory=list)
    count: int = 0

    def add(self, reject: Reject) -> None:
        self.count += 1
        if len(self.kept) < MAX_REJECTS:
            self.kept.append(reject)
        if self.count <= MAX_LOGGED:
            log.warning("live pool: reject, never served: %s", reject.describe())
        if self.count == MAX_LOGGED:
            log.warning("live pool: further rejects are not logged (see LivePool.rejects)")


class SegmentIndex:
    """Each sealed segment's entries, by session and segment, and the stamps read at."""

    def __init__(
        self,
        root: AnyPath,
        spec: PromptSpec,
        options: ExportOptions,
        rejects: Rejects,
        max_line: int = DEFAULT_MAX_LINE,
    ):
        self.root, self.spec, self.options = root, spec, options
        self.rejects, self.max_line = rejects, max_line
        self.fetch: Callable[..., Any] = at_once  # an object store's listings: the deadline
        self.stamps: dict[tuple[str, str], tuple[int, float]] = {}
        self.read: dict[str, set[str]] = {}  # session -> its segments read here
        self.copies: dict[tuple[str, str], list[tuple]] = {}
        self.digests: dict[tuple[str, str], dict[int, bytes]] = {}  # for the stored switch

    def refresh(self, stored: Callable[[str, str], bool]) -> tuple[list[Entry], list[tuple]] | None:
        """``(entries of newly sealed segments, copies gone)``; ``stored(session, segment)``
        says a segment is served from the store already (then it is not read here)."""
        sessions = self.fetch(subfolders, self.root)
        if sessions is None:
            return None
        added: list[Entry] = []
        removed: list[tuple] = []
        for session in sorted(sessions, key=natural_key):
            if session_name_problem(session) is not None:
                continue
            folder = self.root / session / SEGMENTS_DIR
            listed = {s.name: s for s in self.fetch(list_segments, folder)}
            if listed:
                for name in [n for n in self.read.get(session, ()) if n not in listed]:
                    removed += self.forget(session, name)
            for segment in listed.values():
                key = (session, segment.name)
                stamp = (segment.size, segment.mtime)
                if self.stamps.get(key) == stamp or stored(session, segment.name):
                    continue
                removed += self.forget(*key)
                try:
                    entries = self._read(session, segment)
                except OSError as exc:  # gone or unreadable meanwhile: the next refresh
                    log.debug("live pool: segment %s not read now: %s", segment.name, exc)
                    continue
                self.stamps[key] = stamp
                self.read.setdefault(session, set()).add(segment.name)
                self.copies[key] = [e.copy for e in entries]
                self.digests[key] = {e.copy[2]: e.digest for e in entries}
                added += entries
        return added, removed

    def forget(self, session: str, segment: str) -> list[tuple]:
        """Drop one segment's record (its copies, which the caller removes or replaces)."""
        self.stamps.pop((session, segment), None)
        self.read.get(session, set()).discard(segment)
        self.digests.pop((session, segment), None)
        return self.copies.pop((session, segment), [])

    def sizes(self, session: str, segment: str) -> tuple[int, dict[int, bytes]] | None:
        """The size a segment was read at and its lines' digests (``None``: not read here)."""
        stamp = self.stamps.get((session, segment))
        digests = self.digests.get((session, segment))
        return None if stamp is None or digests is None else (stamp[0], digests)

    def _read(self, session: str, segment: Segment) -> list[Entry]:
        display = display_name(session, segment.name)
        split = split_of(session, self.options)
        order = tuple(natural_key(session))
        path = segment.path
        entries: list[Entry] = []
        seen: set[str] = set()
        for number, offset, raw in iter_segment_records(path, self.max_line):
            item = parse_line(raw, number, display, self.max_line)
            if isinstance(item, Reject):
                self.rejects.add(item)
                continue
            if item.state_id in seen:  # a later copy in the same segment: provenance only
                continue
            seen.add(item.state_id)
            ok = self._renders(item, display)
            digest = state_text_digest(item.text)
            key = (1, order, segment.writer, segment.seq, number)
            entries.append(
                Entry(
                    SEGMENT,
                    (session, segment.name, number),
                    item.state_id,
                    digest,
                    key,
                    split,
                    segment_place((path, offset)),
                    item.policy_step,
                    ok,
                )
            )
        return entries

    def _renders(self, item: SessionState, display: str) -> bool:
        try:
            session_prompt(item.state, self.spec)
        except PromptInputError as exc:
            error = f"{item.state_id}: {exc}"
            self.rejects.add(Reject(file=display, line=item.line, error=error, raw=None))
            return False
        return True
