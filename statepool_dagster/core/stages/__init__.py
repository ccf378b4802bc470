"""Build a run's four tables in the store, one checkpoint at a time (Dagster-free)."""

from .job import RunJob, StageReport
from .run import STAGES, build_run, run_stage, stream_stage, without_cyclic_gc

__all__ = [
    "STAGES",
    "RunJob",
    "StageReport",
    "build_run",
    "run_stage",
    "stream_stage",
    "without_cyclic_gc",
]
