"""The pool as a trainer sees it now, kept as an index updated by change.

:class:`LivePool` serves every state ``statepool export --format verl`` would write (the
same de-duplication, a run state winning over a session's, the same selection and
weights), plus the states of sealed session segments Dagster has not stored yet. It holds
no prompt and no state: per served state, where its row is (a run table's part and row, a
stored session part's row, a sealed segment's line), its id, digest, split and weight. A
refresh reads only what changed: a run whose table index changed, segments sealed since,
a stored session whose index changed, ``state_stats`` when a fold rewrote it (then only
the states whose statistics changed are decided again). ``pool[i]`` reads one row.

States served keep their order; new ones come after them; one the selection (or a new
duplicate winning) leaves out disappears. Readers write nothing into the store, except
the feedback fold when given a ``feedback`` folder, as ``statepool feedback fold`` does.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_left, insort
from typing import Any

from ..core.export.records import verl_record
from ..core.export.rows import ExportOptions, ExportRow
from ..core.feedback.select import Selection, SelectionOptions
from ..core.feedback.stats_store import TABLE, stats_folder, update_stats
from ..core.locations import AnyPath, as_path
from ..core.prompts.spec import PromptSpec
from ..core.segments import list_segments
from .entries import Candidates, Entry
from .rows import RowReader, Stale
from .runs import RunIndex
from .segments import Rejects, SegmentIndex
from .stamps import file_stamp, reachable
from .stored import StoredIndex
from .unavailable import Unreadable

log = logging.getLogger(__name__)

# A row found stale while its run is rebuilt (prompts after states) is tried again a while.
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4)


def _location(where: str | os.PathLike[str], storage_options: dict | None) -> AnyPath:
    text = os.fspath(where) if not hasattr(where, "protocol") else where
    if storage_options and isinstance(text, str) and "://" in text:
        from upath import UPath

        return UPath(text, **storage_options)
    return as_path(text)


class LivePool:
    """The served states, in order, and their rows on demand (see the module's doc)."""

    def __init__(
        self,
        store: str | os.PathLike[str],
        sessions: str | os.PathLike[str] | None = None,
        *,
        options: SelectionOptions | None = None,
        feedback: str | os.PathLike[str] | None = None,
        split: str | None = None,
        refresh_seconds: float = 1.0,
        val_fraction: float = 0.0,
        seed: int = 0,
        storage_options: dict[str, Any] | None = None,
        prompt_spec: PromptSpec | None = None,
    ):
        self.store = _location(store, storage_options)
        self.sessions = None if sessions is None else _location(sessions, storage_options)
        self.options = options or SelectionOptions()
        self.feedback = None if feedback is None else str(feedback)
        self.split = split
        self.refresh_seconds = refresh_seconds
        self.export_options = ExportOptions(val_fraction=val_fraction, test_fraction=0.0, seed=seed)
        if prompt_spec is None and self.sessions is not None:
            from ..core.config import Settings

            prompt_spec = Settings.from_env().prompt_spec()
        self.weighted = self.options.weight is not None
        self.with_sessions = False  # rows carry source fields (as the export's, once sessions)
        self.refreshes = 0
        self.reject_log = Rejects()
        self._candidates = Candidates()
        self._runs = RunIndex(self.store, self.export_options)
        self._stored = StoredIndex(self.store, self.export_options)
        self._segments = (
            None
            if self.sessions is None
            else SegmentIndex(self.sessions, prompt_spec, self.export_options, self.reject_log)
        )
        self._reader = RowReader(self.store, prompt_spec)
        self._unreadable = Unreadable(log)
        self._selection = Selection(self.options)
        self._stats_stamp: object = None
        self._folded = -1
        self._order: list[str] = []
        self._served: dict[str, Entry] = {}
        self._keys: dict[str, list[tuple]] = {}
        self._checked = float("-inf")
        self.refresh(force=True)

    # ------------------------------------------------------------------ what is served

    def __len__(self) -> int:
        return len(self._order)

    def state_ids(self) -> list[str]:
        """The served states' ids, in the served order."""
        return list(self._order)

    def state_id(self, i: int) -> str:
        return self._order[i]

    def weight(self, i: int) -> float | None:
        return self._served[self._order[i]].weight

    @property
    def rejects(self) -> list:
        """Bad segment lines met so far (``Reject``: file, line, error), never served."""
        return list(self.reject_log.kept)

    def export_row(self, i: int) -> ExportRow:
        """The ``i``-th served state as the export builds it, read now."""
        problem: BaseException = LookupError("moved")
        for delay in (*RETRY_DELAYS, None):
            sid = self._order[i]
            entry = self._served[sid]
            try:
                row = self._reader.read(entry, bisect_left(self._keys[entry.split], entry.key))
                return self._unreadable.ok(sid, row)
            except Stale as exc:
                problem = exc
                self._reindex(entry)
                if self._unreadable.store_down is not None:
                    break
            except Exception as exc:  # an object store's client raises its own, not OSError
                problem = exc
                break
            if delay is not None and self._served.get(sid) is entry:  # still where it was
                time.sleep(delay)
        return self._unreadable.fallback(self._order[i], problem, self._readable_row)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """The ``i``-th served state's row exactly as ``statepool export --format verl``
        writes it."""
        return verl_record(self.export_row(i), self.with_sessions, self.weighted)

    def _readable_row(self) -> ExportRow | None:
        for sid in self._order[:64]:
            entry = self._served[sid]
            try:
                return self._reader.read(entry, bisect_left(self._keys[entry.split], entry.key))
            except Exception:  # Stale, OSError, an object store client's own errors
                continue
        return None

    # ------------------------------------------------------------------ refreshing

    def refresh(self, force: bool = False) -> bool:
        """Read what changed since the last refresh (at most every ``refresh_seconds`` unless
        ``force``); whether the served states changed. Never raises for an unreadable store."""
        now = time.monotonic()
        if not force and now - self._checked < self.refresh_seconds:
            return False
        self._checked = now
        before = (len(self._order), self._change)
        try:
            self._fold()
            self._refresh_selection()  # first: new states are decided on the new stats
            self._refresh_sources()
        except OSError as exc:  # a trainer keeps training on what it has
            self._unreadable.store_problem(exc)
        except Exception:
            self._unreadable.failed(log)
        self.refreshes += 1
        return (len(self._order), self._change) != before

    _change = 0  # counts changes to the served states

    def _refresh_sources(self) -> None:
        if not reachable(self.store):
            self._unreadable.store_problem(FileNotFoundError(f"store {self.store} not reachable"))
        else:
            self._unreadable.store_back()
            runs = self._runs.refresh()
            if runs is not None:
                self._apply(*runs)
            known = self._segments.sizes if self._segments is not None else (lambda s, n: None)
            stored = self._stored.refresh(known)
            if stored is not None:
                added, removed, newly = stored
                self.with_sessions = self.with_sessions or bool(self._stored.stamps)
                for session, name in newly:
                    if self._segments is not None:
                        removed += [
                            c for c in self._segments.forget(session, name) if c not in removed
                        ]
                self._apply(added, removed)
        if self._segments is not None:
            change = self._segments.refresh(self._stored.has)
            if change is not None:
                self.with_sessions = self.with_sessions or bool(change[0])
                self._apply(*change)

    def _apply(self, added: list[Entry], removed: list[tuple]) -> None:
        if not added and not removed:
            return
        keep = {e.copy for e in added}
        won, lost = self._candidates.update(added, [c for c in removed if c not in keep])
        self._serve(won, lost)

    def _reindex(self, entry: Entry) -> None:
        """A row was not where the index said: index its run (or session) again now."""
        self._reader.drop()
        if entry.copy[0] in self._runs.entries:
            change = self._runs.index_run(entry.copy[0])
            if change is not None:
                self._apply(*change)
                return
        self._checked = float("-inf")
        self.refresh(force=True)

    # ------------------------------------------------------------------ selection

    def _fold(self) -> None:
        if not self.feedback:
            return
        sealed = len(list_segments(self.feedback))
        if sealed != self._folded:
            update_stats(self.store, self.feedback)
            self._folded = sealed

    def _refresh_selection(self) -> None:
        if not self.options.active:
            return
        stamp = file_stamp(stats_folder(self.store) / TABLE)
        if stamp == self._stats_stamp:
            return
        selection = Selection.from_options(self.options, self.store)
        old = self._selection.stats
        changed = {s for s, v in selection.stats.items() if old.get(s) != v}
        changed |= old.keys() - selection.stats.keys()
        self._selection, self._stats_stamp = selection, stamp
        winners = self._candidates.winners
        self._serve({s for s in changed if s in winners}, set())

    # ------------------------------------------------------------------ the served order

    def _serve(self, won: set[str], lost: set[str]) -> None:
        """Serve the states that won (and pass the selection), stop serving those that lost."""
        gone = set()
        for sid in lost:
            if sid in self._served:
                self._unserve(sid)
                gone.add(sid)
        new: list[Entry] = []
        for sid in won:
            entry = self._candidates.winners[sid]
            decision = self._selection.decide(sid)
            if not decision.keep or (self.split is not None and entry.split != self.split):
                if sid in self._served:
                    self._unserve(sid)
                    gone.add(sid)
                continue
            if entry.weight != decision.weight:
                entry.weight = decision.weight
                self._change += 1
            old = self._served.get(sid)
            if old is None:
                new.append(entry)
            elif old is not entry:  # the same state from another copy: same place, same row
                self._drop_key(old)
                insort(self._keys.setdefault(entry.split, []), entry.key)
                self._served[sid] = entry
        if gone:
            self._order = [s for s in self._order if s not in gone]
            self._change += 1
        new.sort(key=lambda e: e.key)
        for entry in new:
            self._order.append(entry.sid)
            self._served[entry.sid] = entry
        for split in {e.split for e in new}:
            keys = self._keys.setdefault(split, [])
            mine = [e.key for e in new if e.split == split]
            if len(mine) > 64:  # many at once (an open): one sort, not an insertion each
                keys += mine
                keys.sort()
            else:
                for key in mine:
                    insort(keys, key)
        self._change += len(new)

    def _unserve(self, sid: str) -> None:
        self._drop_key(self._served.pop(sid))

    def _drop_key(self, entry: Entry) -> None:
        keys = self._keys[entry.split]
        del keys[bisect_left(keys, entry.key)]
