"""The code location: assets, job, sensors, store and settings."""

from dagster import Definitions

from .assets import statepool_assets
from .checks import statepool_checks
from .exports import export_automation_sensor, training_dataset
from .io_managers import StatepoolIOManager
from .jobs import RUN_EXECUTOR, statepool_batch_job, statepool_job
from .resources import StatepoolSettings
from .sensors import runs_sensor

defs = Definitions(
    assets=[*statepool_assets, training_dataset],
    asset_checks=statepool_checks,
    jobs=[statepool_job, statepool_batch_job],
    # Runs launched from the UI too (STATEPOOL_EXECUTOR): by default in-process, each asset
    # spreading its partitions over the cores itself.
    executor=RUN_EXECUTOR,
    sensors=[runs_sensor, export_automation_sensor],
    resources={
        "statepool": StatepoolSettings(),
        "statepool_store": StatepoolIOManager(),
    },
)
