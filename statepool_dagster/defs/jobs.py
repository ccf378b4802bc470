"""The job that builds runs' states and prompts, and checks them."""

from dagster import AssetSelection, ExecutorDefinition, define_asset_job

from ..core.names import JOB
from .assets import run_assets

DESCRIPTION = (
    "Build runs' state pools in one step: read each run's episodes and skill snapshots, "
    "join the checkpoint states, render their curator prompts into the store, then run "
    "the asset checks, all recorded per run. One run (what the sensor requests) or a "
    "range of runs (a single-run backfill, a `statepool sync` batch)."
)


def statepool_job_def(executor: ExecutorDefinition):
    """The runs' job on ``executor`` (chosen by the settings when the code location loads)."""
    return define_asset_job(
        JOB,
        selection=AssetSelection.assets(run_assets),
        executor_def=executor,
        description=DESCRIPTION,
    )
