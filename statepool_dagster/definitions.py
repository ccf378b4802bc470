"""The code location: assets, jobs, sensors, store and settings.

Built when Dagster loads the code location (``@definitions``), not at import: the sensors'
tick interval and the runs' executor are part of the definitions, and come from the
settings then (``STATEPOOL_SENSOR_INTERVAL``, ``STATEPOOL_EXECUTOR``). Everything else is
read by the runs themselves, from the settings resource, when they start.
"""

from functools import cache

import dagster as dg
from dagster import Definitions

from .core.config import Settings
from .core.names import JOB, SETTINGS, STORE

DEFINITION_SETTINGS = ("sensor_interval", "executor", "celery_broker", "celery_backend")


def build_defs(settings: Settings | None = None) -> Definitions:
    """The definitions for ``settings`` (default: the environment's, for the fields the
    definitions hold; a bad value there falls back to the defaults, the runs then report it)."""
    from pydantic import ValidationError

    from .defs.executors import statepool_executor

    if settings is None:
        try:
            settings = Settings.from_env(only=DEFINITION_SETTINGS[:1])
        except ValidationError:
            settings = Settings()
    return _build(settings.sensor_interval, statepool_executor())


@cache
def _build(interval: int, executor: dg.ExecutorDefinition) -> Definitions:
    from .defs.assets import run_assets
    from .defs.exports import export_automation_sensor, training_dataset
    from .defs.feedback import state_stats, state_stats_job
    from .defs.io_managers import statepool_store
    from .defs.jobs import statepool_job_def
    from .defs.resources import StatepoolSettings
    from .defs.sensors import FAST_INTERVAL, feedback_sensor_def, runs_sensor_def
    from .defs.session_sensors import sessions_sensor_def
    from .defs.sessions import session_assets, sessions_job
    from .storages import enable_event_batches

    # A run's planned events stored as one batch, whatever the storage (PostgreSQL's inserts
    # them in one statement); the SQLite storage of dagster.yaml sets it too.
    enable_event_batches()
    return Definitions(
        assets=[run_assets, training_dataset, session_assets, state_stats],
        jobs=[statepool_job_def(executor), sessions_job, state_stats_job],
        # Runs launched from the UI too: by default in-process, the one step spreading its
        # partitions over the cores itself.
        executor=executor,
        sensors=[
            runs_sensor_def(interval),
            export_automation_sensor,
            sessions_sensor_def(min(interval, FAST_INTERVAL)),
            feedback_sensor_def(),
        ],
        resources={SETTINGS: StatepoolSettings(), STORE: statepool_store},
    )


@dg.definitions
def defs() -> Definitions:
    """What ``dg dev``, the daemon and ``workspace.yaml`` load."""
    return build_defs()


def statepool_job() -> dg.JobDefinition:
    """The runs' job, rebuilt by another process from this module (``reconstructable``)."""
    return defs().resolve_job_def(JOB)
