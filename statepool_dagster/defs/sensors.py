"""Watch the runs folder: register new runs and rematerialize the ones whose files changed."""

import time

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ..core.config import Settings
from ..core.runs.changes import plan_sync
from ..core.runs.files import discover_runs
from .fingerprints import recorded_fingerprints
from .jobs import statepool_job
from .partitions import RUNS, runs_partitions
from .resources import statepool_settings
from .tags import SOURCE_FINGERPRINT


def sensor_interval() -> int:
    """The tick interval: part of the definition, so read when the code location loads.

    A bad value in any setting must not stop the code location from loading: the
    runs report it when they start.
    """
    try:
        return statepool_settings.settings().sensor_interval
    except ValueError:
        return Settings.model_fields["sensor_interval"].default


@sensor(
    job=statepool_job,
    minimum_interval_seconds=sensor_interval(),
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Watches STATEPOOL_RUNS_DIR. A new run folder becomes a `runs` partition; a run whose "
        "files changed since its last materialization (and have settled) is rebuilt."
    ),
)
def runs_sensor(context: SensorEvaluationContext) -> SensorResult:
    # The resource instance the definitions bind, not a resource parameter: a sensor context
    # built for a test or the bench (build_sensor_context) carries no resources.
    settings = statepool_settings.settings()
    discovery = discover_runs(settings.runs_dir)
    plan = plan_sync(
        discovery,
        known_keys=context.instance.get_dynamic_partitions(RUNS),
        recorded=recorded_fingerprints(context.instance),
        now=time.time(),
        settle_seconds=settings.settle_seconds,
    )
    for name, reason in plan.invalid.items():
        context.log.warning(f"run folder {name!r} skipped: {reason}")
    for problem in plan.problems:
        context.log.warning(problem)
    summary = plan.describe()
    context.log.info(summary)
    requests = [
        RunRequest(
            partition_key=r.run.name,
            run_key=f"{r.run.name}:{r.fingerprint.digest}",
            tags={SOURCE_FINGERPRINT: r.fingerprint.digest},
        )
        for r in plan.to_materialize
    ]
    adds = [runs_partitions.build_add_request(plan.new_keys)] if plan.new_keys else []
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=adds,
        skip_reason=None if requests else summary,
    )
