"""Dagster alone, shaped like ``statepool sync``'s batch run, doing no work.

python bench/dagster_floor.py N_PARTITIONS   (DAGSTER_HOME: a fresh instance)

Import, the instance, and one run of one four-asset ``multi_asset`` step over N
partitions with per-partition metadata and two checks evaluated per partition, recorded as
the run assets' step records them (``defs/runs/recording.py``: each partition's materializations
by hand, then its checks, a few partitions to a write): what any sync of that many runs
pays to record its results.
"""

# No `from __future__ import annotations`: Dagster checks the context's annotation as a type.
import gc
import sys
import warnings
from contextlib import nullcontext

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetMaterialization,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    DagsterInstance,
    Definitions,
    DynamicPartitionsDefinition,
    Output,
    PreviewWarning,
    define_asset_job,
    in_process_executor,
    multi_asset,
)
from step_stats import RANGE_END, RANGE_START

try:
    from statepool_dagster.defs.runs.recording import (
        DATA_VERSION_TAG,
        RECORD_AT_LEAST,
        batched_writes,
    )
except ImportError:  # a tree before the step recorded each run as built: no batches of its own
    DATA_VERSION_TAG, RECORD_AT_LEAST = "dagster/data_version", 8

    def batched_writes(context):
        return nullcontext()


warnings.simplefilter("ignore", BetaWarning)
warnings.simplefilter("ignore", PreviewWarning)

runs = DynamicPartitionsDefinition(name="runs")
NAMES = ["run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts"]
DEPS = {"checkpoint_states": NAMES[:2], "curator_prompts": NAMES[2:3]}
CHECKS = [
    AssetCheckSpec(f"check{i}", asset=NAMES[2 + i % 2], partitions_def=runs) for i in range(2)
]


@multi_asset(
    specs=[AssetSpec(n, deps=DEPS.get(n, []), skippable=True) for n in NAMES],
    check_specs=CHECKS,
    can_subset=True,
    partitions_def=runs,
    backfill_policy=BackfillPolicy.single_run(),
)
def noop(context: AssetExecutionContext):
    keys = context.partition_keys
    tags = {DATA_VERSION_TAG: context.run.run_id}
    for start in range(0, len(keys), RECORD_AT_LEAST):
        with batched_writes(context):
            for key in keys[start : start + RECORD_AT_LEAST]:
                for name in NAMES:
                    yield AssetMaterialization(name, partition=key, metadata={"rows": 1}, tags=tags)
                for check in CHECKS:
                    yield AssetCheckEvaluation(
                        asset_key=check.asset_key,
                        check_name=check.name,
                        partition=key,
                        passed=True,
                        metadata={"rows": 1},
                    )
    for check in CHECKS:
        yield Output(None, context.assets_def.get_output_name_for_asset_check_key(check.key))


defs = Definitions(
    assets=[noop], jobs=[define_asset_job("noop_batch", executor_def=in_process_executor)]
)


def main() -> int:
    instance = DagsterInstance.get()
    gc.freeze()  # as statepool sync does: the loaded heap is never walked again
    keys = [f"run{i:03d}" for i in range(int(sys.argv[1]))]
    instance.add_dynamic_partitions("runs", keys)
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    result = defs.resolve_job_def("noop_batch").execute_in_process(
        instance=instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]}, run_config=quiet
    )
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
