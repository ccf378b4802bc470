"""The executor of every job, chosen by ``STATEPOOL_EXECUTOR`` when the code location loads
(``definitions.py`` loads the definitions then, not at import).

``in_process`` (the default) runs a run's step in its own process, spreading its
partitions over the cores. ``celery`` hands each step to the Celery workers listening
on ``STATEPOOL_CELERY_BROKER`` (``deploy/celery/``); they need the same instance
(``DAGSTER_HOME``), the same code and the same ``STATEPOOL_*`` environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from dagster import (
    DagsterInvariantViolationError,
    Definitions,
    Executor,
    ExecutorDefinition,
    InitExecutorContext,
    definitions,
    in_process_executor,
)
from pydantic import ValidationError

from ..core.config import Settings

EXECUTOR_SETTINGS = ("executor", "celery_broker", "celery_backend")


def executor_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The executor's settings alone: a bad value elsewhere is reported by the runs reading it."""
    return Settings.from_env(environ, only=EXECUTOR_SETTINGS)


def statepool_executor(environ: Mapping[str, str] | None = None) -> ExecutorDefinition:
    """The executor the environment selects.

    A bad setting must not stop the code location from loading (the UI would show a
    traceback instead of the definitions): the runs fail at their start with the reason.
    """
    try:
        settings = executor_settings(environ)
    except ValidationError as error:
        return refusing_executor(Settings.describe_error(error))
    if settings.executor == "celery":
        return celery_executor(settings)
    return in_process_executor


def celery_executor(settings: Settings) -> ExecutorDefinition:
    """dagster-celery's executor on the configured broker and backend (imported only here).

    The URLs are read from the environment when a run starts, so a password in them never
    becomes part of the definitions.
    """
    try:
        from dagster_celery import celery_executor as dagster_celery_executor
    except ImportError:
        return refusing_executor(
            f"{Settings.env_name('executor')}=celery needs the `celery` extra: "
            "pip install -e '.[celery]'"
        )
    broker = Settings.env_name("celery_broker")
    backend = Settings.env_name("celery_backend") if settings.celery_backend else broker
    return dagster_celery_executor.configured(
        {"broker": {"env": broker}, "backend": {"env": backend}},
        name="statepool_celery",
        description=f"Each step a Celery task for the workers on ${broker}.",
    )


def refusing_executor(reason: str) -> ExecutorDefinition:
    """An executor that fails every run at its start with ``reason``."""

    def refuse(_init_context: InitExecutorContext) -> Executor:
        raise DagsterInvariantViolationError(reason)

    return ExecutorDefinition(
        name="statepool_misconfigured", executor_creation_fn=refuse, description=reason
    )


@definitions
def code_location_executor() -> Definitions:
    """Every job's executor, by default in-process (runs launched from the UI too): the one
    step spreads its partitions over the cores itself."""
    return Definitions(executor=statepool_executor())
