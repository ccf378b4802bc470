"""The code location: assets, job, sensors, store and settings."""

from dagster import Definitions

from .core.names import SETTINGS, STORE
from .defs.assets import run_assets
from .defs.exports import export_automation_sensor, training_dataset
from .defs.feedback import feedback_sensor, state_stats, state_stats_job
from .defs.io_managers import statepool_store
from .defs.jobs import RUN_EXECUTOR, statepool_job
from .defs.resources import statepool_settings
from .defs.sensors import runs_sensor
from .defs.session_sensors import sessions_sensor
from .defs.sessions import session_assets, sessions_job

defs = Definitions(
    assets=[run_assets, training_dataset, session_assets, state_stats],
    jobs=[statepool_job, sessions_job, state_stats_job],
    # Runs launched from the UI too (STATEPOOL_EXECUTOR): by default in-process, the one
    # step spreading its partitions over the cores itself.
    executor=RUN_EXECUTOR,
    sensors=[runs_sensor, export_automation_sensor, sessions_sensor, feedback_sensor],
    resources={SETTINGS: statepool_settings, STORE: statepool_store},
)
