"""The job that builds runs' states and prompts, and checks them."""

from dagster import AssetSelection, define_asset_job

from ..core.names import JOB
from .assets import run_assets
from .executors import statepool_executor

# Part of the definitions, so chosen when the code location loads. By default in-process:
# a run is one step, which spreads its partitions over the cores itself.
RUN_EXECUTOR = statepool_executor()

statepool_job = define_asset_job(
    JOB,
    selection=AssetSelection.assets(run_assets),
    executor_def=RUN_EXECUTOR,
    description=(
        "Build runs' state pools in one step: read each run's episodes and skill snapshots, "
        "join the checkpoint states, render their curator prompts into the store, then run "
        "the asset checks, all recorded per run. One run (what the sensor requests) or a "
        "range of runs (a single-run backfill, a `statepool sync` batch)."
    ),
)
