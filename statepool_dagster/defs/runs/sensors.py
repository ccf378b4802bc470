"""The runs sensor: new run folders become partitions; new and changed runs are requested."""

from __future__ import annotations

import time

from dagster import DagsterInstance, Definitions, RunRequest, SensorDefinition, definitions

from ...core.config import Settings
from ...core.names import JOB, RUNS
from ...core.runs.changes import plan_sync
from ...core.runs.files import discover_runs
from ..tags import CHANGE, SOURCE_FINGERPRINT
from ..ticks import DEFAULT_INTERVAL, Tick, result, sensor_interval, watching
from .fingerprints import recorded_fingerprints


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


def runs_sensor_def(interval: int = DEFAULT_INTERVAL) -> SensorDefinition:
    return watching(
        runs_tick,
        "runs_sensor",
        JOB,
        interval,
        "Watches STATEPOOL_RUNS_DIR. A new run folder becomes a `runs` partition; a run whose "
        "files changed since its last materialization (and have settled) is rebuilt.",
    )


@definitions
def runs_sensor_at_interval() -> Definitions:
    """The runs sensor at the interval the settings give when the code location loads."""
    return Definitions(sensors=[runs_sensor_def(sensor_interval())])
