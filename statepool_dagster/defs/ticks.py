"""A sensor as a tick function: the skeleton the runs, sessions and feedback sensors share.

Each sensor is a tick function, ``(instance, settings, cursor) -> Tick``, made a Dagster sensor
by :func:`watching` (one skeleton: the settings resource in, warnings and a summary logged,
a ``SensorResult`` out). ``statepool sync`` calls the same tick functions, so the daemon and a
sync decide alike; the sync then runs what the result asks for with the same jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)
from pydantic import ValidationError

from ..core.config import Settings
from ..core.runs.changes import SyncPlan
from .resources import StatepoolSettings

# The runs sensor's tick interval unless STATEPOOL_SENSOR_INTERVAL sets another when the code
# location loads; the other sensors tick at least this often.
DEFAULT_INTERVAL = Settings.model_fields["sensor_interval"].default
FAST_INTERVAL = 15  # sessions and the export: a sealed segment reaches training_dataset soon


def sensor_interval() -> int:
    """The runs sensor's interval the environment sets, read when the code location loads (a
    bad value there falls back to the default; the runs then report it)."""
    try:
        return Settings.from_env(only=("sensor_interval",)).sensor_interval
    except ValidationError:
        return DEFAULT_INTERVAL


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
