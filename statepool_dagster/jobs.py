"""The jobs that build runs' states and prompts."""

from dagster import AssetSelection, define_asset_job

from .assets import statepool_assets
from .executors import statepool_executor

_ASSETS = AssetSelection.assets(*statepool_assets)

# Part of the definitions, so chosen when the code location loads. By default in-process:
# four short steps in a chain run faster in one process than in one process per step.
RUN_EXECUTOR = statepool_executor()

statepool_job = define_asset_job(
    "statepool_job",
    selection=_ASSETS,
    executor_def=RUN_EXECUTOR,
    description=(
        "Build one run's state pool: read its episodes and skill snapshots, join the "
        "checkpoint states and render their curator prompts into the store, then check them."
    ),
)

statepool_batch_job = define_asset_job(
    "statepool_batch_job",
    # Asset checks evaluate one partition per run; a batch covers many, so it skips them.
    selection=_ASSETS.without_checks(),
    executor_def=RUN_EXECUTOR,
    description=(
        "The same four assets over a range of runs in one run (what `statepool sync` uses): "
        "each asset handles its partitions on every core. Asset checks run with statepool_job."
    ),
)
