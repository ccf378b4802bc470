"""Build a run's four tables in the store, one checkpoint at a time (Dagster-free)."""

from .job import OpenTables, StageReport
from .run import build_run, build_stages, run_each, stream_each, without_cyclic_gc

__all__ = [
    "OpenTables",
    "StageReport",
    "build_run",
    "build_stages",
    "run_each",
    "stream_each",
    "without_cyclic_gc",
]
