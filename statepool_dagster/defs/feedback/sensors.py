"""The feedback sensor: a run of ``state_stats`` once sealed feedback segments are unread."""

from __future__ import annotations

from dagster import DagsterInstance, RunRequest

from ...core.config import Settings
from ...core.names import STATE_STATS, STATE_STATS_JOB
from ..ticks import DEFAULT_INTERVAL, Tick, result, watching


def feedback_tick(
    instance: DagsterInstance, settings: Settings, _cursor: str | None = None
) -> Tick:
    """A run of ``state_stats`` when sealed feedback segments exist that the last fold has not
    read."""
    from ...core.feedback.folders import folded_segments, unfolded_segments

    new = unfolded_segments(settings)
    if not new:
        return Tick(result([], {}, "no new feedback segments"), "no new feedback segments")
    folded = folded_segments(settings.store_dir)
    request = RunRequest(run_key=f"{STATE_STATS}:{len(folded)}:{max(new)}")
    return Tick(result([request], {}, ""), f"{len(new)} new feedback segments")


feedback_sensor = watching(
    feedback_tick,
    "feedback_sensor",
    STATE_STATS_JOB,
    DEFAULT_INTERVAL,
    "Folds newly sealed feedback segments into state_stats.",
)
