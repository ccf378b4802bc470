"""The job that builds one run's states and prompts."""

from dagster import AssetSelection, define_asset_job, in_process_executor

from .assets import statepool_assets

statepool_job = define_asset_job(
    "statepool_job",
    selection=AssetSelection.assets(*statepool_assets),
    # Four short steps in a chain: one process is faster than one process per step.
    executor_def=in_process_executor,
    description=(
        "Build one run's state pool: read its episodes and skill snapshots, join the "
        "checkpoint states and render their curator prompts into the store."
    ),
)
