"""The job that builds runs' states and prompts, and checks them."""

from dagster import AssetSelection, define_asset_job

from ...core.names import JOB
from .assets import run_assets

DESCRIPTION = (
    "Build runs' state pools in one step: read each run's episodes and skill snapshots, "
    "join the checkpoint states, render their curator prompts into the store, then run "
    "the asset checks, all recorded per run. One run (what the sensor requests) or a "
    "range of runs (a single-run backfill, a `statepool sync` batch)."
)

# On the code location's executor (``executors.py``), chosen by the settings when it loads.
statepool_job = define_asset_job(
    JOB, selection=AssetSelection.assets(run_assets), description=DESCRIPTION
)
