"""Step time per partition of the latest Dagster run that covered one run folder.

python bench/step_stats.py RUN_NAME   (DAGSTER_HOME names the instance)

Prints the sum of that Dagster run's step durations divided by the partitions it covered
(one, or a batch's range), as JSON; null if no recent run covered it.
"""

from __future__ import annotations

import json
import sys

from dagster import DagsterInstance

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
PARTITION = "dagster/partition"


def covered(instance: DagsterInstance, tags: dict[str, str]) -> list[str]:
    if RANGE_START in tags:
        keys = list(instance.get_dynamic_partitions("runs"))
        lo, hi = keys.index(tags[RANGE_START]), keys.index(tags[RANGE_END])
        return keys[lo : hi + 1]
    return [tags[PARTITION]] if PARTITION in tags else []


def step_seconds(instance: DagsterInstance, run_name: str) -> float | None:
    for record in instance.get_run_records(limit=50):
        run = record.dagster_run
        keys = covered(instance, run.tags)
        if run_name in keys:
            stats = instance.get_run_step_stats(run.run_id)
            total = sum(s.end_time - s.start_time for s in stats if s.end_time and s.start_time)
            return total / len(keys)
    return None


def main() -> int:
    with DagsterInstance.get() as instance:
        print(json.dumps(step_seconds(instance, sys.argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
