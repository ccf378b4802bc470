"""What to build, decided from the folders and the store: the runs, sessions and feedback sensors.

Each sensor is a tick function, ``(instance, settings, cursor) -> Tick``, made a Dagster sensor
by :func:`watching` (one skeleton: the settings resource in, warnings and a summary logged,
a ``SensorResult`` out). ``statepool sync`` calls the same tick functions, so the daemon and a
sync decide alike; the sync then runs what the result asks for with the same jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ..core.config import Settings
from ..core.names import JOB, RUNS, STATE_STATS, STATE_STATS_JOB
from ..core.runs.changes import SyncPlan, plan_sync
from ..core.runs.files import discover_runs
from .fingerprints import recorded_fingerprints
from .resources import StatepoolSettings
from .tags import CHANGE, SOURCE_FINGERPRINT

# The runs sensor's tick interval unless STATEPOOL_SENSOR_INTERVAL sets another when the code
# location loads (definitions.py); the other sensors tick at least this often.
DEFAULT_INTERVAL = Settings.model_fields["sensor_interval"].default
FAST_INTERVAL = 15  # sessions and the export: a sealed segment reaches training_dataset in 90 s


@dataclass
class Tick:
    """One evaluation: what to ask Dagster for, and what was seen (logged by the sensor,
    reported by ``statepool sync``)."""

    result: SensorResult
    summary: str
    warnings: list[str] = field(default_factory=list)
    plan: SyncPlan | None = None  # the runs sensor's: every run folder and its change


TickFunction = Callable[[DagsterInstance, Settings, "str | None"], Tick]


def watching(tick: TickFunction, name: str, job_name: str, interval: int, description: str):
    """``tick`` as a Dagster sensor on ``job_name``, on by default, taking the settings resource."""

    def evaluate(context: SensorEvaluationContext, statepool: StatepoolSettings) -> SensorResult:
        seen = tick(context.instance, statepool.settings(), context.cursor)
        for warning in seen.warnings:
            context.log.warning(warning)
        context.log.info(seen.summary)
        return seen.result

    return sensor(
        name=name,
        job_name=job_name,
        minimum_interval_seconds=interval,
        default_status=DefaultSensorStatus.RUNNING,
        description=description,
    )(evaluate)


def result(requests: list[RunRequest], adds: dict[str, list[str]], summary: str, **kw):
    """A ``SensorResult``: the run requests, the partitions to add first, else why it skipped."""
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[
            AddDynamicPartitionsRequest(partitions_def_name=name, partition_keys=keys)
            for name, keys in adds.items()
            if keys
        ],
        skip_reason=None if requests else summary,
        **kw,
    )


def runs_tick(instance: DagsterInstance, settings: Settings, _cursor: str | None = None) -> Tick:
    """New run folders become partitions; new runs and runs whose files changed (and have
    settled) are requested, each with its files' fingerprint in the run key."""
    plan = plan_sync(
        discover_runs(settings.runs_dir),
        known_keys=instance.get_dynamic_partitions(RUNS),
        recorded=recorded_fingerprints(instance),
        now=time.time(),
        settle_seconds=settings.settle_seconds,
    )
    requests = [
        RunRequest(
            partition_key=r.run.name,
            run_key=f"{r.run.name}:{r.fingerprint.digest}",
            tags={SOURCE_FINGERPRINT: r.fingerprint.digest, CHANGE: r.status.value},
        )
        for r in plan.to_materialize
    ]
    warnings = [f"run folder {name!r} skipped: {why}" for name, why in plan.invalid.items()]
    summary = plan.describe()
    found = result(requests, {RUNS: plan.new_keys}, summary)
    return Tick(found, summary, warnings + plan.problems, plan)


def feedback_tick(
    instance: DagsterInstance, settings: Settings, _cursor: str | None = None
) -> Tick:
    """A run of ``state_stats`` when sealed feedback segments exist that the last fold has not
    read."""
    from ..core.feedback.folders import folded_segments, unfolded_segments

    new = unfolded_segments(settings)
    if not new:
        return Tick(result([], {}, "no new feedback segments"), "no new feedback segments")
    folded = folded_segments(settings.store_dir)
    request = RunRequest(run_key=f"{STATE_STATS}:{len(folded)}:{max(new)}")
    return Tick(result([request], {}, ""), f"{len(new)} new feedback segments")


def runs_sensor_def(interval: int = DEFAULT_INTERVAL) -> SensorDefinition:
    return watching(
        runs_tick,
        "runs_sensor",
        JOB,
        interval,
        "Watches STATEPOOL_RUNS_DIR. A new run folder becomes a `runs` partition; a run whose "
        "files changed since its last materialization (and have settled) is rebuilt.",
    )


def feedback_sensor_def(interval: int = DEFAULT_INTERVAL) -> SensorDefinition:
    return watching(
        feedback_tick,
        "feedback_sensor",
        STATE_STATS_JOB,
        interval,
        "Folds newly sealed feedback segments into state_stats.",
    )


# With the default intervals; the code location makes its own from the settings.
runs_sensor = runs_sensor_def()
feedback_sensor = feedback_sensor_def()
