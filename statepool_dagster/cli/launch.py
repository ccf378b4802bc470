"""The code location's jobs run from the command line: in this process, on the real definitions.

What a sensor's result asks for is done here as the daemon would: its partitions added, then
each requested run executed (``execute_in_process``; with ``STATEPOOL_EXECUTOR=celery`` the
runs' job through ``execute_job``, its steps on the workers).
"""

from __future__ import annotations

import os

from dagster import DagsterInstance, SensorResult

from ..core.config import Settings
from ..core.names import JOB
from ..defs.tags import PARTITION, PARTITION_RANGE_END, PARTITION_RANGE_START, SYNC_PID


def add_partitions(instance: DagsterInstance, result: SensorResult) -> None:
    """The partitions a sensor's result adds (before any of its runs, as the daemon does)."""
    for request in result.dynamic_partitions_requests or ():
        if request.partition_keys:
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)


def _config(log_level: str) -> dict:
    return {"loggers": {"console": {"config": {"log_level": log_level}}}}


def run_job(
    instance: DagsterInstance,
    job: str,
    log_level: str = "ERROR",
    partition_key: str | None = None,
    tags: dict[str, str] | None = None,
    run_config: dict | None = None,
    **selection,
):
    """One run of the code location's ``job``, in this process; its result (never raises)."""
    from ..definitions import defs

    config = {**_config(log_level), **(run_config or {})}
    return (
        defs()
        .resolve_job_def(job)
        .execute_in_process(
            instance=instance,
            partition_key=partition_key,
            tags={**(tags or {}), SYNC_PID: str(os.getpid())},
            raise_on_error=False,
            run_config=config,
            **selection,
        )
    )


def run_partitions(
    instance: DagsterInstance,
    settings: Settings,
    partitions: list[str],
    tags: dict[str, str],
    log_level: str,
):
    """One run of the runs' job over consecutive ``partitions`` (a range when several)."""
    first, last = partitions[0], partitions[-1]
    if len(partitions) > 1:
        tags = {PARTITION_RANGE_START: first, PARTITION_RANGE_END: last}
    if settings.executor == "in_process":
        key = first if len(partitions) == 1 else None
        return run_job(instance, JOB, log_level, partition_key=key, tags=tags)
    # execute_in_process ignores the job's executor; any other needs a job it can rebuild
    # elsewhere (a Celery worker loads it from this module's pointer).
    from dagster import execute_job, reconstructable

    from ..definitions import statepool_job

    if len(partitions) == 1:
        tags = {**tags, PARTITION: first}
    return execute_job(
        reconstructable(statepool_job),
        instance,
        run_config=_config(log_level),
        tags={**tags, SYNC_PID: str(os.getpid())},
        raise_on_error=False,
    )
