"""``statepool`` in this process, with the CPU it spends in the runs' Dagster runs counted.

python bench/sync_share.py OUT_JSON sync -q     (does what ``statepool sync -q`` does)

The command runs as the installed ``statepool`` script runs it (``statepool_dagster.cli``'s
``main``, from whichever checkout ``PYTHONPATH`` names); around every in-process run of the
runs' job (``JobDefinition.execute_in_process``) it counts this process's own CPU, user +
system, its build workers' left out: Dagster's run machinery, the events it stores, the
step's recording of each run and the hand-over of the workers' results. OUT_JSON gets
``{"cpu_s": ..., "partitions": ..., "runs": ...}``: that CPU, the run partitions those
runs covered, and how many runs there were.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from dagster import JobDefinition
from step_stats import PARTITION, RANGE_END, RANGE_START

RUNS_JOB = "statepool_job"  # core.names.JOB in every tree so far
RUNS_PARTITIONS = "runs"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _partitions(instance, partition_key: str | None, tags: dict[str, str]) -> int:
    if partition_key is not None or PARTITION in tags:
        return 1
    if RANGE_START in tags:
        keys = list(instance.get_dynamic_partitions(RUNS_PARTITIONS))
        return keys.index(tags[RANGE_END]) - keys.index(tags[RANGE_START]) + 1
    return 0


def main() -> int:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    share = {"cpu_s": 0.0, "partitions": 0, "runs": 0}
    execute = JobDefinition.execute_in_process

    def counted(job: JobDefinition, *args, **kwargs):
        if job.name != RUNS_JOB:
            return execute(job, *args, **kwargs)
        started = _cpu()
        try:
            return execute(job, *args, **kwargs)
        finally:
            share["cpu_s"] += _cpu() - started
            share["runs"] += 1
            tags = kwargs.get("tags") or {}
            share["partitions"] += _partitions(
                kwargs["instance"], kwargs.get("partition_key"), tags
            )

    JobDefinition.execute_in_process = counted  # ty: ignore[invalid-assignment]
    from statepool_dagster.cli import main as statepool

    sys.argv = ["statepool", *argv]
    try:
        return statepool()
    finally:
        out.write_text(json.dumps(share))


if __name__ == "__main__":
    sys.exit(main())
