"""Sessions: states written by rollout workers while they run, the pool's second source."""

from .spec import SessionSpecMismatch
from .writer import StateWriter

__all__ = ["SessionSpecMismatch", "StateWriter"]
