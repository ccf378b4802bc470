"""The jobs that build runs' states and prompts."""

from dagster import AssetSelection, define_asset_job, in_process_executor

from .assets import statepool_assets

_ASSETS = AssetSelection.assets(*statepool_assets)

statepool_job = define_asset_job(
    "statepool_job",
    selection=_ASSETS,
    # Four short steps in a chain: one process is faster than one process per step.
    executor_def=in_process_executor,
    description=(
        "Build one run's state pool: read its episodes and skill snapshots, join the "
        "checkpoint states and render their curator prompts into the store, then check them."
    ),
)

statepool_batch_job = define_asset_job(
    "statepool_batch_job",
    # Asset checks evaluate one partition per run; a batch covers many, so it skips them.
    selection=_ASSETS.without_checks(),
    executor_def=in_process_executor,
    description=(
        "The same four assets over a range of runs in one run (what `statepool sync` uses): "
        "each asset handles its partitions on every core. Asset checks run with statepool_job."
    ),
)
