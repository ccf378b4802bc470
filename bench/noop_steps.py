"""The per-step floor: the median recorded duration of a Dagster step that does nothing.

python bench/noop_steps.py   prints seconds as JSON
"""

# No `from __future__ import annotations`: Dagster checks the context's annotation as a type.
import json
import statistics
import sys
import tempfile

from dagster import (
    AssetExecutionContext,
    Definitions,
    DynamicPartitionsDefinition,
    asset,
    define_asset_job,
    in_process_executor,
    instance_for_test,
)

runs = DynamicPartitionsDefinition(name="runs")


@asset(partitions_def=runs)
def a(context: AssetExecutionContext) -> None:
    context.add_output_metadata({"rows": 1})


@asset(partitions_def=runs, deps=[a])
def b(context: AssetExecutionContext) -> None:
    context.add_output_metadata({"rows": 1})


defs = Definitions(assets=[a, b], jobs=[define_asset_job("noop", executor_def=in_process_executor)])


def main() -> int:
    steps: list[float] = []
    with tempfile.TemporaryDirectory() as home, instance_for_test(temp_dir=home) as instance:
        instance.add_dynamic_partitions("runs", ["r"])
        job = defs.resolve_job_def("noop")
        for _ in range(4):
            result = job.execute_in_process(instance=instance, partition_key="r")
            stats = instance.get_run_step_stats(result.run_id)
            steps += [s.end_time - s.start_time for s in stats]
    print(json.dumps(statistics.median_high(steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
