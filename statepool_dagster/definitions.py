"""The code location: everything under ``defs/``, found by Dagster's ``load_from_defs_folder``.

``defs/`` keeps one folder per domain (``runs/``, ``sessions/``, ``feedback/``, ``exports/``),
each with its assets, checks, jobs and sensors, and beside them what they share: the settings
resource, the store, the executor, the sensors' skeleton. Loaded when Dagster loads the code
location (``@definitions``), not at import: the sensors' tick interval and the runs' executor
are part of the definitions, and come from the settings then (``STATEPOOL_SENSOR_INTERVAL``,
``STATEPOOL_EXECUTOR``). Everything else is read by the runs themselves, from the settings
resource, when they start.
"""

import warnings
from functools import cache
from pathlib import Path

import dagster as dg
from dagster import Definitions

from .core.config import Settings, settings_key
from .core.names import JOB

DEFINITION_SETTINGS = ("sensor_interval", "executor", "celery_broker", "celery_backend")
_DEFINITION_VARIABLES = {Settings.env_name(name) for name in DEFINITION_SETTINGS}


@dg.definitions
def defs() -> Definitions:
    """What ``dg dev``, ``dg check defs``, the daemon and ``workspace.yaml`` load."""
    return _load(tuple(item for item in settings_key() if item[0] in _DEFINITION_VARIABLES))


@cache
def _load(_settings: tuple[tuple[str, str], ...]) -> Definitions:
    """The definitions for the settings the environment now sets (a bad value there falls
    back to the default; the runs then report it). Loaded once for each."""
    from .storages import enable_event_batches

    # A run's planned events stored as one batch, whatever the storage (PostgreSQL's inserts
    # them in one statement); the SQLite storage of dagster.yaml sets it too.
    enable_event_batches()
    package = Path(__file__).parent
    if (package.parent / "pyproject.toml").is_file():  # a checkout: the dg project's own
        return dg.load_from_defs_folder(path_within_project=package)
    # Installed without the project's pyproject.toml (a wheel): the same folder, named directly
    # (what load_from_defs_folder builds once it found the project, its warnings silenced too).
    from . import defs as defs_folder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        tree = dg.ComponentTree.from_module(defs_folder, project_root=package.parent)
        return tree.build_defs()


def statepool_job() -> dg.JobDefinition:
    """The runs' job, rebuilt by another process from this module (``reconstructable``)."""
    return defs().resolve_job_def(JOB)
