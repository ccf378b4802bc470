"""Sessions Dagster stored (``session_states`` / ``session_prompts``) in the live pool's index.

A session is looked at again only when its ``.index.json`` changed, and then only the
segments it lists newly (or with a new size) are read: each part's small columns (id,
line, first copy, policy step) give each state's row, and its prompts part which states
have a prompt. A state's digest is taken from the segment it was read from before the
session was stored (same size: the same lines); only otherwise is its text read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq

from ..core import AnyPath, Stamp, is_local, open_ranged
from ..core.export import ExportOptions, split_of
from ..core.names import SESSION_STATES
from ..core.runs import natural_key
from ..core.segments import parse_segment_name
from ..core.sessions import INDEX, SessionFolders, session_name_problem
from ..core.states import state_text_digest
from ..core.store import utf8_views
from .entries import STORED, Entry, stored_place
from .stamps import index_stamps
from .unavailable import at_once

log = logging.getLogger(__name__)

Known = Callable[[str, str], "tuple[int, dict[int, bytes]] | None"]


def open_parquet(path: AnyPath) -> pq.ParquetFile:
    """A Parquet file memory-mapped where it is local, read through fsspec otherwise."""
    if is_local(path):
        return pq.ParquetFile(path, memory_map=True)
    return pq.ParquetFile(open_ranged(path))  # a row group, not 50 MiB of read-ahead


def _rows(path: AnyPath, columns: list[str]) -> list[tuple[int, int, dict]]:
    """``(row group, row in it, the row's columns)`` of each row of a part."""
    out = []
    with open_parquet(path) as parquet:
        for group in range(parquet.num_row_groups):
            table = parquet.read_row_group(group, columns=columns, use_threads=False)
            values = [table[c].to_pylist() for c in columns]
            out += [
                (group, at, dict(zip(columns, row, strict=True)))
                for at, row in enumerate(zip(*values, strict=True))
            ]
    return out


class StoredIndex:
    """Each stored session's entries, by session and segment, and the stamps read at."""

    def __init__(self, root: AnyPath, options: ExportOptions):
        self.root, self.options = root, options
        self.stamps: dict[str, Stamp] = {}
        self.segments: dict[str, dict[str, int]] = {}  # session -> segment -> size stored
        self.copies: dict[tuple[str, str], list[tuple]] = {}
        self.unreadable: dict[str, None] = {}  # sessions whose index could not be read
        self.fetch: Callable[..., Any] = at_once  # an object store's listings: the deadline

    def has(self, session: str, segment: str) -> bool:
        return segment in self.segments.get(session, {})

    def refresh(self, known: Known) -> tuple[list[Entry], list[tuple], list[tuple]] | None:
        """``(entries added, copies removed, (session, segment) newly stored)``; ``known``
        gives a segment's size and digests where it was read before being stored."""
        now = self.fetch(index_stamps, self.root / SESSION_STATES, INDEX)
        if now is None:
            return None
        added: list[Entry] = []
        removed: list[tuple] = []
        stored: list[tuple] = []
        for session in self.stamps.keys() - now.keys():
            del self.stamps[session]
            for name in self.segments.pop(session, {}):
                removed += self.copies.pop((session, name), [])
        for session in sorted(now, key=natural_key):
            if self.stamps.get(session) == now[session] or session_name_problem(session):
                continue
            try:
                change = self._session(session, known)
            except (OSError, ValueError, KeyError) as exc:
                # Unknown, not empty: what was indexed stays served; tried at each refresh.
                if session not in self.unreadable:
                    log.warning(
                        "live pool: stored session %s cannot be read now (%s): serving what "
                        "was indexed; trying again at each refresh",
                        session,
                        exc,
                    )
                self.unreadable[session] = None
                continue
            if self.unreadable.pop(session, None) is not None:
                log.warning("live pool: stored session %s is readable again", session)
            self.stamps[session] = now[session]
            added += change[0]
            removed += change[1]
            stored += change[2]
        return added, removed, stored

    def _session(self, session: str, known: Known) -> tuple[list[Entry], list, list]:
        folders = SessionFolders(self.root, session)
        index = folders.load_index()
        have = self.segments.setdefault(session, {})
        added, removed, stored = [], [], []
        for name in [n for n in have if n not in index]:
            del have[name]
            removed += self.copies.pop((session, name), [])
        for name, entry in index.items():
            size = entry.get("stamp")
            if have.get(name) == size or parse_segment_name(name) is None:
                continue
            entries = self._segment(folders, name, size, known)
            copies = {e.copy for e in entries}
            removed += [c for c in self.copies.get((session, name), []) if c not in copies]
            self.copies[(session, name)] = [e.copy for e in entries]
            have[name] = size
            added += entries
            stored.append((session, name))
        return added, removed, stored

    def _segment(
        self, folders: SessionFolders, name: str, size: int | None, known: Known
    ) -> list[Entry]:
        session = folders.session
        writer, seq = parse_segment_name(name)  # type: ignore[misc]
        stem = name.removesuffix(".jsonl")
        states = folders.states / f"{stem}.parquet"
        columns = ["state_id", "line", "first_copy", "policy_step"]
        rows = [r for r in _rows(states, columns) if r[2]["first_copy"]]
        prompts = {
            row["state_id"]: (group, at)
            for group, at, row in _rows(folders.prompts / f"{stem}.parquet", ["state_id"])
        }
        before = known(session, name)
        digests = before[1] if before is not None and before[0] == size else None
        if digests is None or any(row["line"] not in digests for _, _, row in rows):
            digests = self._digests(states)
        split = split_of(session, self.options)
        order = tuple(natural_key(session))
        entries = []
        for group, at, row in rows:
            line = row["line"]
            prompt = prompts.get(row["state_id"])
            where = stored_place((stem, group, at, prompt))
            entries.append(
                Entry(
                    STORED,
                    (session, name, line),
                    row["state_id"],
                    digests[line],
                    (1, order, writer, seq, line),
                    split,
                    where,
                    row["policy_step"],
                    prompt is not None,
                )
            )
        return entries

    @staticmethod
    def _digests(states: AnyPath) -> dict[int, bytes]:
        """Each first copy's digest, its text read a row group at a time and let go."""
        digests = {}
        with open_parquet(states) as parquet:
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group, columns=["line", "first_copy", "state"])
                lines = table["line"].to_pylist()
                firsts = table["first_copy"].to_pylist()
                for at, text in enumerate(utf8_views(table["state"])):
                    if firsts[at]:
                        digests[lines[at]] = state_text_digest(text)
                del text, table
        return digests
