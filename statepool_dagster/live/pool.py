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
the feedback fold when given a ``feedback`` folder and it holds sealed segments the saved
fold has not read (as ``statepool feedback --fold`` would fold them).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from ..core import file_stamp, is_local, storage_errors
from ..core.export import SPLITS, ExportOptions, ExportRow, verl_record
from ..core.feedback import (
    STATS_TABLE,
    Selection,
    SelectionOptions,
    folded_segments,
    stats_folder,
    update_stats,
)
from ..core.prompts import PromptSpec
from ..core.segments import list_segments
from .entries import SEGMENT, Candidates, Entry, StateSource
from .row_reader import ROW_ERRORS, RowReader, Stale
from .runs import RunIndex
from .segments import Rejects, SegmentIndex
from .served import Served
from .stamps import location, reachable
from .stored import StoredIndex
from .unavailable import (
    READ_DEADLINE,
    Deadline,
    NoAnswer,
    StorePace,
    Unreadable,
    endpoint_address,
)
from .versions import PoolVersion, load_version, row_key_digest, save_version

log = logging.getLogger(__name__)

# A row found stale while its run is rebuilt (prompts after states) is tried again a while.
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4)


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
        read_deadline: float = READ_DEADLINE,
        stand_ins: bool = False,
        as_of: str | None = None,
    ):
        if split not in (None, *SPLITS):
            raise ValueError(f"split {split!r}: None (every state) or one of {', '.join(SPLITS)}")
        self.store = location(store, storage_options)
        self.sessions = None if sessions is None else location(sessions, storage_options)
        self.options = options or SelectionOptions()
        self.feedback = None if feedback is None else str(feedback)
        self.split = split
        self.refresh_seconds = refresh_seconds
        self.export_options = ExportOptions(val_fraction=val_fraction, test_fraction=0.0, seed=seed)
        if prompt_spec is None and self.sessions is not None:
            from ..core import Settings

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
        self._spec = prompt_spec
        self._remote = (
            not is_local(self.store),
            not (self.sessions is None or is_local(self.sessions)),
        )
        self._deadline = Deadline(read_deadline, lambda: endpoint_address(self.store))
        self._reader = self._new_reader()
        for index, remote in ((self._runs, 0), (self._stored, 0), (self._segments, 1)):
            if index is not None and self._remote[remote]:
                index.fetch = self._deadline.run  # a listing that hangs fails the step
        self._unreadable = Unreadable(
            log, stand_ins, lambda: reachable(self.store), stale=read_deadline
        )
        self._selection = Selection(self.options)
        self._stats_stamp: object = None
        self._folded: set[str] | None = None  # the sealed feedback segments last seen
        self._served = Served(split)
        self._checked = float("-inf")
        self._pace = StorePace(is_local(self.store), refresh_seconds)
        self._row_keys: dict[str, tuple[Entry, str]] = {}  # a served state's row key digest
        self._saved: tuple[tuple[int, int], str, float] | None = None  # the last version kept
        self.refresh(force=True)
        self.as_of: PoolVersion | None = None
        self.changed_since: list[str] = []  # with ``as_of``: states whose row changed since
        self.missing_since: list[str] = []  # with ``as_of``: its states not served now
        if as_of is not None:
            self._take_up(load_version(self.store, as_of))

    # ------------------------------------------------------------------ what is served

    def __len__(self) -> int:
        return len(self._served)

    def state_ids(self) -> list[str]:
        """The served states' ids, in the served order."""
        return list(self._served.order)

    @property
    def changes(self) -> int:
        """A count that moves whenever what is served changes (states, order, weights, rows),
        however the change came (a refresh, or a row found moved while read)."""
        return self._served.changes

    def state_id(self, i: int) -> str:
        return self._served.order[i]

    def weight(self, i: int) -> float | None:
        return self._served.at(i).weight

    def source(self, state_id: str) -> StateSource | None:
        """Where the served state ``state_id`` comes from (``None``: not served now)."""
        entry = self._served.entries.get(state_id)
        return None if entry is None else entry.origin

    def row_key(self, i: int) -> tuple:
        """A version of the ``i``-th state's row, from the index: it changes when the row's
        content may have (a run rebuilt), so a kept copy can tell an old row from a new one."""
        return self._served.at(i).row_key

    def rekeyed(self, since: int = 0) -> tuple[list[str], int]:
        """The served states whose row changed (``row_key``) since the count ``since``, and
        the count to pass next time (0: since the open)."""
        changed = [sid for sid, at in self._served.rekeyed.items() if at > since]
        return changed, self._served.changes

    @property
    def rejects(self) -> list:
        """Bad segment lines met so far (``Reject``: file, line, error; the first 10,000,
        ``reject_log.count`` counts them all), never served."""
        return list(self.reject_log.kept)

    def export_row(self, i: int) -> ExportRow:
        """The ``i``-th served state as the export builds it, read now.

        A row on an object store is waited for at most ``read_deadline``; while the store is
        down it is not asked for: :class:`PoolUnavailable` at once, or with ``stand_ins``
        another state's row marked ``stand_in_for`` (see :mod:`.unavailable`).
        """
        problem: BaseException = LookupError("moved")
        sid = self.state_id(i)  # an IndexError for an index past the end, as a list's
        for delay in (*RETRY_DELAYS, None):
            if not -len(self._served) <= i < len(self._served):  # states left meanwhile
                problem = IndexError(f"pool index {i} out of range: state {sid} left the pool")
                break
            entry = self._served.at(i)
            sid = entry.sid
            if self._remote_entry(entry) and self._unreadable.skip_store():
                problem = OSError(f"the store is down: {self._unreadable.store_down}")
                break
            try:
                row = self._read(self._reader.read, entry, self._served.index(entry))
                return self._unreadable.ok(sid, row)
            except Stale as exc:
                problem = exc
                self._reindex(entry)
                if self._unreadable.store_down is not None:
                    break
            except storage_errors() as exc:
                problem = exc
                if self._remote_entry(entry):
                    self._unreadable.store_problem(exc)
                break
            except ROW_ERRORS as exc:  # a part no reader expects: this row, not the store
                problem = exc
                break
            if delay is not None and self._served.entries.get(sid) is entry:  # not moved
                time.sleep(delay)
        if isinstance(problem, IndexError) and not self._unreadable.stand_ins:
            raise problem
        return self._unreadable.instead(sid, problem, self._readable_row)

    def export_rows(self, indices: Iterable[int]) -> list[ExportRow]:
        """``[pool.export_row(i) for i in indices]``, each row group and segment file read
        once (a row that cannot be read so is read alone, as ``export_row`` reads it); the
        batch waits at most ``read_deadline`` for an object store."""
        indices = list(indices)
        entries = [self._served.at(i) for i in indices]  # an IndexError as a list's
        items = [(e, self._served.index(e)) for e in entries]
        skip = self._unreadable.skip_store()
        batch = [item for item in items if not (skip and self._remote_entry(item[0]))]
        try:
            read = self._read(self._reader.read_many, batch) if batch else []
        except storage_errors() as exc:
            self._unreadable.store_problem(exc)
            read = [exc] * len(batch)
        found = {id(e): r for (e, _), r in zip(batch, read, strict=True)}
        rows = [found.get(id(e)) for e in entries]
        failed = zip(entries, rows, strict=True)
        down = next(
            (r for e, r in failed if isinstance(r, storage_errors()) and self._remote_entry(e)),
            None,
        )
        if down is not None:
            self._unreadable.store_problem(down)
        return [
            self._unreadable.ok(e.sid, r) if isinstance(r, ExportRow) else self.export_row(i)
            for i, e, r in zip(indices, entries, rows, strict=True)
        ]

    def rows(self, indices: Iterable[int]) -> list[dict[str, Any]]:
        """``[pool[i] for i in indices]``, read as :meth:`export_rows` reads them."""
        return [
            verl_record(r, self.with_sessions, self.weighted) for r in self.export_rows(indices)
        ]

    def __getitem__(self, i: int) -> dict[str, Any]:
        """The ``i``-th served state's row exactly as ``statepool export --format verl``
        writes it."""
        return verl_record(self.export_row(i), self.with_sessions, self.weighted)

    def _remote_entry(self, entry: Entry) -> bool:
        """Whether the entry's row is on an object store (the store's, or a sealed segment's
        in a sessions folder that is one)."""
        return self._remote[entry.kind == SEGMENT]

    def _read(self, read, *args):
        """``read(*args)``, each of its fetches within the deadline on an object store; one
        that ran out of time marks the store down and leaves the reader to the late fetch."""
        try:
            return read(*args)
        finally:
            why = self._deadline.tripped
            if why is not None:
                self._reader = self._new_reader()
                self._deadline.tripped = None
                self._unreadable.store_problem(NoAnswer(why))

    def _new_reader(self) -> RowReader:
        reader = RowReader(self.store, self._spec)
        if any(self._remote):
            reader.fetch = self._deadline.run
        return reader

    def _readable_row(self) -> ExportRow | None:
        for i in range(min(64, len(self._served))):
            entry = self._served.at(i)
            if self._remote_entry(entry) and self._unreadable.skip_store():
                continue
            try:
                return self._read(self._reader.read, entry, self._served.index(entry))
            except (Stale, *ROW_ERRORS, *storage_errors()):
                continue
        return None

    # ------------------------------------------------------------------ versions

    def version(self) -> str:
        """Keep the served order in the store as a pool version (written once per content,
        older versions pruned as :mod:`.versions` says); its id, for a trainer checkpoint."""
        from ..core import Settings

        served = (self._served.changes, len(self._served))
        if (
            self._saved is not None
            and self._saved[0] == served
            and time.monotonic() < self._saved[2]
        ):
            return self._saved[1]  # nothing served changed since: the same version
        settings = Settings.from_env(only=("keep_versions", "keep_version_days"))
        ids = self.state_ids()
        keys = [self._row_key(sid) for sid in ids]
        version = save_version(
            self.store, ids, keys, settings.keep_versions, settings.keep_version_days
        )
        self._saved = (served, version, time.monotonic() + 3600)  # then listed again
        return version

    def _row_key(self, sid: str) -> str:
        entry = self._served.entries[sid]
        known = self._row_keys.get(sid)
        if known is None or known[0] is not entry:
            known = self._row_keys[sid] = (entry, row_key_digest(entry.row_key))
        return known[1]

    def _take_up(self, version: PoolVersion) -> None:
        """Serve ``version``'s states first, in its order; tell which rows changed since."""
        self.as_of = version
        self._served.reorder(version.state_ids)
        served = self._served.entries
        self.missing_since = [sid for sid in version.state_ids if sid not in served]
        self.changed_since = [
            sid
            for sid, key in zip(version.state_ids, version.row_keys, strict=True)
            if sid in served and self._row_key(sid) != key
        ]
        if self.missing_since or self.changed_since:
            log.warning(
                "live pool: since version %s, %d of its states are no longer served (%s) and "
                "%d rows changed (%s): pool.missing_since and pool.changed_since list them",
                version.id,
                len(self.missing_since),
                ", ".join(self.missing_since[:5]),
                len(self.changed_since),
                ", ".join(self.changed_since[:5]),
            )

    # ------------------------------------------------------------------ refreshing

    def refresh(self, force: bool = False) -> bool:
        """Read what changed since the last refresh (at most every ``refresh_seconds`` unless
        ``force``); whether the served states changed. Never raises for an unreadable store.
        While the store is down only ``force`` asks it (within the deadline) on this thread."""
        now = time.monotonic()
        if not force and now - self._checked < self.refresh_seconds:
            return False
        self._checked = now
        before = (len(self._served), self._served.changes)
        steps = [self._fold, self._refresh_selection, self._refresh_runs, self._refresh_stored]
        outage = self._remote[0] and self._unreadable.store_down is not None and not force
        if outage:  # asked in the background; the store's tables once it answers
            steps = steps if self._unreadable.back() else []
        elif not (force or self._pace.due(now)):
            steps = []  # the store's tables later; sealed segments now
        elif not self._reachable():
            self._unreadable.store_problem(FileNotFoundError(f"store {self.store} not reachable"))
            self._pace.troubled(time.monotonic())
            steps = []
        started, troubled = time.monotonic(), False
        for step in steps:  # one failing leaves the others be
            troubled = self._run_step(step) or troubled
        if steps:
            self._pace.listed(started, time.monotonic(), troubled)
            if not troubled:
                self._unreadable.store_back()
        sessions_down = self._remote[1] and self._unreadable.store_down is not None
        if not sessions_down and self._run_step(self._refresh_segments) and self._remote[1]:
            self._unreadable.store_problem(OSError("the sessions folder cannot be listed"))
        self._deadline.tripped = None  # a listing ran out of time: its step failed, logged
        self.refreshes += 1
        return (len(self._served), self._served.changes) != before

    def _reachable(self) -> bool:
        """Whether the store answers, asked within the deadline on an object store."""
        if not self._remote[0]:
            return reachable(self.store)
        try:
            return self._deadline.run(reachable, self.store)
        except NoAnswer:
            self._deadline.tripped = None  # the probe shares nothing with the reader
            return False

    def _run_step(self, step) -> bool:
        """Run one step of a refresh; whether the store could not be read."""
        try:
            step()
        except storage_errors() as exc:  # a trainer keeps training on what it has
            self._unreadable.store_problem(exc)
            return True
        except ROW_ERRORS:  # a file no reader expects, as for a row: logged once, never raised
            self._unreadable.failed(log)
        return False

    def _refresh_runs(self) -> None:
        runs = self._runs.refresh()
        if runs is not None:
            self._apply(*runs)

    def _refresh_stored(self) -> None:
        known = self._segments.sizes if self._segments is not None else (lambda s, n: None)
        stored = self._stored.refresh(known)
        if stored is None:
            return
        added, removed, newly = stored
        self.with_sessions = self.with_sessions or bool(self._stored.stamps)
        if self._segments is not None:
            for session, name in newly:  # served from the store from now on
                removed += self._segments.forget(session, name)
        self._apply(added, removed)

    def _refresh_segments(self) -> None:
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
        """Fold sealed feedback segments the saved fold has not read, as ``statepool feedback
        --fold`` would: the one write of a pool given ``feedback``. With none, nothing is
        written (groups waiting to close are closed by the next fold that has a segment)."""
        if not self.feedback:
            return
        sealed = {s.name for s in list_segments(self.feedback)}
        if sealed == self._folded:
            return
        if sealed - folded_segments(self.store):
            update_stats(self.store, self.feedback)
        self._folded = sealed

    def _refresh_selection(self) -> None:
        if not self.options.active:
            return
        stamp = file_stamp(stats_folder(self.store) / STATS_TABLE)
        if stamp == self._stats_stamp:
            return
        selection = Selection.from_options(self.options, self.store)
        old = self._selection.stats
        changed = {s for s, v in selection.stats.items() if old.get(s) != v}
        changed |= old.keys() - selection.stats.keys()
        self._selection, self._stats_stamp = selection, stamp
        winners = self._candidates.winners
        self._serve({s for s in changed if s in winners}, set())

    def _serve(self, won: set[str], lost: set[str]) -> None:
        self._served.update(won, lost, self._candidates.winners, self._selection.decide)
