"""Run the build stages for runs: in order, under each run's store lock, on a fork pool."""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

from ..config import Settings
from ..names import EPISODES, PROMPTS, RUN_ASSETS, SNAPSHOTS, STATES
from ..store.arrow_memory import load_arrow, release_if_large
from ..store.atomic import libc_function
from .episodes import build_episodes
from .job import RunJob, StageReport
from .prompts import build_prompts
from .snapshots import build_snapshots
from .states import build_states

Stage = Callable[[RunJob], StageReport]


def _releasing(stage: Stage) -> Stage:
    """``stage``, then the memory Arrow kept from it handed back (the next stage starts lean)."""

    @functools.wraps(stage)
    def run(job: RunJob) -> StageReport:
        try:
            return stage(job)
        finally:
            release_if_large()

    return run


STAGES: dict[str, Stage] = {
    EPISODES: _releasing(build_episodes),
    SNAPSHOTS: _releasing(build_snapshots),
    STATES: _releasing(build_states),
    PROMPTS: _releasing(build_prompts),
}
_PR_SET_PDEATHSIG = 1


def build_run(
    settings: Settings, run: str, assets: Iterable[str] = RUN_ASSETS
) -> dict[str, StageReport]:
    """The selected stages of one run, in the data's order (the core path, without Dagster)."""
    wanted = frozenset(assets)
    job = RunJob(settings, run, wanted)
    with job.layout.lock(run), without_cyclic_gc():
        return {asset: STAGES[asset](job) for asset in RUN_ASSETS if asset in wanted}


def run_stage(stage: Stage, jobs: list[RunJob], workers: int = 0) -> list[StageReport]:
    """Run one ``stage`` for every job, on up to ``workers`` processes (0: one per core)."""
    return _pool_map(_locked, [(stage, job) for job in jobs], workers)


def _pool_map(fn, tasks: list, workers: int) -> list:
    workers = min(workers or os.cpu_count() or 1, len(tasks))
    if workers <= 1:
        return [fn(task) for task in tasks]
    # fork: workers inherit the loaded code, so starting them costs milliseconds.
    load_arrow()
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(os.getpid(),)
    )
    try:
        return list(pool.map(fn, tasks))
    except BaseException:  # e.g. a signal: hand no further run to a worker
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)


def _locked(task: tuple[Stage, RunJob]) -> StageReport:
    """One stage of one run under the run's store lock: two writers never interleave."""
    stage, job = task
    with job.layout.lock(job.run), without_cyclic_gc():
        return stage(job)


@contextlib.contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """Pause Python's cycle collector while a stage allocates its (acyclic) records.

    In a process that has Dagster loaded, each full collection walks hundreds of
    thousands of objects; a stage's allocations set off several. Reference counting
    still frees everything a stage drops; any cycle waits for the next collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _start_worker(parent: int) -> None:
    """Set up a forked worker: die with the parent, and leave the inherited heap alone.

    ``gc.freeze`` keeps the collector from walking (and so copying, page by page) the
    objects the worker inherited. A worker must not outlive a killed parent: it would
    hold the parent's store locks.
    """
    gc.freeze()
    prctl = libc_function("prctl")
    if prctl is not None:  # elsewhere the check below still catches a parent already gone
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
