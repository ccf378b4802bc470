"""Whether a sync has nothing to do: the sensors' rules on the instance's answers kept.

The runs, sessions and feedback sensors' rules, applied without Dagster to the answers an
earlier sync kept (the runs and sessions registered, each run's recorded fingerprint).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

from .config import Settings
from .feedback.folders import unfolded_segments
from .runs.changes import SyncPlan, plan_sync
from .runs.files import discover_runs
from .sessions.layout import discover_sessions


def idle_plan(
    settings: Settings,
    known_runs: Collection[str],
    recorded: Mapping[str, str],
    known_sessions: Collection[str],
    settle_seconds: float,
) -> SyncPlan | None:
    """The runs' plan when no sensor would ask for anything: no run to register or build, no
    new session nor sealed segment to build, no feedback to fold; ``None`` otherwise."""
    plan = plan_sync(
        discover_runs(settings.runs_dir),
        known_keys=known_runs,
        recorded=recorded,
        now=time.time(),
        settle_seconds=settle_seconds,
    )
    if plan.to_materialize or plan.new_keys:
        return None
    sessions, _ = discover_sessions(settings.sessions_dir)
    if set(sessions) - set(known_sessions):
        return None
    if sessions:  # the session tables' reader only when there are sessions
        from .sessions.build import pending_segments

        if any(pending_segments(settings.sessions_dir, settings.store_dir, s) for s in sessions):
            return None
    return None if unfolded_segments(settings) else plan
