"""Run the build stages for runs: in order, under each run's store lock, on a fork pool."""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

from ..config import Settings
from ..names import EPISODES, PROMPTS, RUN_ASSETS, SNAPSHOTS, STATES
from ..store.renames import libc_function
from ..store.rows import load_arrow, release_if_large
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
    return [report for ready in stream_stage(stage, jobs, workers) for report in ready]


def stream_stage(stage: Stage, jobs: list[RunJob], workers: int = 0) -> Iterator[list]:
    """``run_stage``'s results in job order, as they come: each time, the next one (waited
    for) and every one after it already done.

    A caller can write what it gets in one go and never waits while holding it; the pool
    builds on meanwhile. Closing the iterator early hands no further job to a worker.
    """
    return _pool_stream(_locked, [(stage, job) for job in jobs], workers)


def _pool_stream(fn, tasks: list, workers: int) -> Iterator[list]:
    workers = min(workers or os.cpu_count() or 1, len(tasks))
    if workers <= 1:
        for task in tasks:
            yield [fn(task)]
        return
    # fork: workers inherit the loaded code, so starting them costs milliseconds.
    load_arrow()
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(os.getpid(),)
    )
    try:
        futures = deque(pool.submit(fn, task) for task in tasks)
        while futures:
            ready = [futures.popleft().result()]
            while futures and futures[0].done():
                ready.append(futures.popleft().result())
            yield ready
    except BaseException:  # e.g. a signal, or the caller closing early: no further task
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
