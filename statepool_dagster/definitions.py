"""The code location: assets, job, sensor, store and settings."""

from dagster import Definitions

from .assets import statepool_assets
from .checks import statepool_checks
from .io_managers import StatepoolIOManager
from .jobs import statepool_job
from .resources import StatepoolSettings
from .sensors import runs_sensor

defs = Definitions(
    assets=statepool_assets,
    asset_checks=statepool_checks,
    jobs=[statepool_job],
    sensors=[runs_sensor],
    resources={
        "statepool": StatepoolSettings(),
        "statepool_store": StatepoolIOManager(),
    },
)
