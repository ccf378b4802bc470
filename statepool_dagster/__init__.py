"""statepool_dagster: checkpoint states and curator prompts from self-evolving agent runs.

The Dagster definitions are ``statepool_dagster.definitions.defs()`` (the code location,
built when called; ``statepool_dagster.defs`` is the sub-package they are made of).
Reading the store with :func:`load_state_pool` / :func:`load_prompts` /
:func:`iter_session_table` never imports Dagster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.export.sessions import iter_session_table
    from .core.states.models import CheckpointState
    from .readers import load_prompts, load_state_pool

__all__ = ["CheckpointState", "iter_session_table", "load_prompts", "load_state_pool"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the command line starts without the models (pydantic) or pandas.
    if name in ("load_state_pool", "load_prompts"):
        from . import readers

        return getattr(readers, name)
    if name == "iter_session_table":
        from .core.export.sessions import iter_session_table

        return iter_session_table
    if name == "CheckpointState":
        from .core.states.models import CheckpointState

        return CheckpointState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
