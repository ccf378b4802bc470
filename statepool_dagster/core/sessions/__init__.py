"""Sessions: states written by rollout workers while they run, the pool's second source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .spec import SessionSpecMismatch
    from .writer import StateWriter

__all__ = ["SessionSpecMismatch", "StateWriter"]


def __getattr__(name: str) -> Any:
    # On first use: finding the sessions (every sync) must not load the writer's Arrow.
    if name == "StateWriter":
        from .writer import StateWriter

        return StateWriter
    if name == "SessionSpecMismatch":
        from .spec import SessionSpecMismatch

        return SessionSpecMismatch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
