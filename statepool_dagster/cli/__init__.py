"""The command line face: ``statepool sync|demo|status|export|report|score|ingest|feedback``."""

from .main import main

__all__ = ["main"]
