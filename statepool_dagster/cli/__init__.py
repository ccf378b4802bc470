"""The command line face: ``statepool sync|demo|status|export|report|score``."""

from .main import main

__all__ = ["main"]
