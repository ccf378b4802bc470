"""The store's states as a trainer would get them now: new states in, left-out states out.

Run and session states alike, collected by the exports' own code (``collect_export``:
the same dedupe, a run state winning over a session's, and the same selection).

:class:`LivePool` re-reads the store when it changed (a prompts table's index, the
feedback statistics) and, when given a feedback folder, first folds new feedback
segments into ``state_stats`` itself, so a trainer sees its own feedback without a
Dagster daemon. Each refresh re-collects the store's rows: its cost grows with the pool.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from ..core.export.collect import collect_export
from ..core.export.rows import ExportOptions, ExportRow, SourceOptions
from ..core.feedback.select import Selection, SelectionOptions
from ..core.feedback.stats_store import TABLE, stats_folder, update_stats
from ..core.locations import is_local
from ..core.names import PROMPTS, SESSION_STATES, STATES, TABLE_INDEX
from ..core.segments import list_segments
from ..core.sessions.reading import stored_sessions
from ..core.sessions.store import INDEX as SESSION_INDEX
from ..core.store.layout import StoreLayout

log = logging.getLogger(__name__)


def _mtime(path: object) -> int:
    try:
        return os.stat(path).st_mtime_ns  # type: ignore[arg-type]
    except OSError:
        return 0


@dataclass
class LivePool:
    """The rows to serve and their weights, refreshed at most every ``refresh_seconds``."""

    store: str
    options: SelectionOptions = field(default_factory=SelectionOptions)
    feedback: str | None = None
    refresh_seconds: float = 1.0
    sources: SourceOptions = field(default_factory=SourceOptions)
    rows: list[ExportRow] = field(default_factory=list)
    weights: list[float | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    refreshes: int = 0
    _stamp: object = None
    _checked: float = float("-inf")
    _folded: int = -1

    def refresh(self, force: bool = False) -> bool:
        """Re-read the store if it changed; whether the rows were rebuilt."""
        now = time.monotonic()
        if not force and now - self._checked < self.refresh_seconds:
            return False
        self._checked = now
        self._fold()
        stamp = self._store_stamp()
        if not force and stamp is not None and stamp == self._stamp:
            return False
        self._stamp = stamp
        selection = Selection.from_options(self.options, self.store)
        export = collect_export(
            self.store, ExportOptions(val_fraction=0.0), self.sources, selection
        )
        self.rows = export.rows
        self.weights = [row.weight for row in export.rows]
        self.problems = [p for p in export.problems if p.startswith("state ")]  # selection
        self.refreshes += 1
        log.info("live pool: %d states served, %d left out", len(self.rows), len(self.problems))
        return True

    def _fold(self) -> None:
        if not self.feedback:
            return
        sealed = len(list_segments(self.feedback))
        if sealed != self._folded:
            update_stats(self.store, self.feedback)
            self._folded = sealed

    def _store_stamp(self) -> object:
        """What changes when a run's states or prompts, or the stats, are rewritten."""
        layout = StoreLayout(self.store)
        if not is_local(layout.root):
            return None  # no cheap stamp through fsspec: always re-read
        parts = []
        for asset in (PROMPTS, STATES):
            for run in sorted(layout.runs_with(asset)):
                folder = layout.root / asset / run
                parts.append((asset, run, _mtime(folder), _mtime(folder / TABLE_INDEX)))
        sessions = layout.root / SESSION_STATES
        for session in stored_sessions(self.store):
            parts.append(("session", session, _mtime(sessions / session / SESSION_INDEX)))
        parts.append(("stats", _mtime(stats_folder(self.store) / TABLE)))
        return tuple(parts)
