"""Run the build stages for runs: in order, under each run's store lock, on a fork pool."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from ..config import Settings
from ..errors import StatepoolError
from ..names import EPISODES, PROMPTS, RUN_ASSETS, SNAPSHOTS, STATES
from ..runs.files import fingerprint_run
from ..store.atomic import libc_function
from ..store.layout import StoreLayout
from ..store.rows import load_arrow, release_if_large
from .episodes import build_episodes
from .job import OpenTables, StageReport, run_folder
from .prompts import RenderedPrompts, build_prompts
from .snapshots import build_snapshots
from .states import build_states

T = TypeVar("T")
RunTask = Callable[[str, Settings, OpenTables], T]  # what a step does with one run
_PR_SET_PDEATHSIG = 1
# How long a worker told to stop (a signal to the build) may take to unwind before it is killed.
STOP_GRACE_SECONDS = 2.0


def build_stages(
    run: str, settings: Settings, tables: OpenTables, assets: Iterable[str] = RUN_ASSETS
) -> Iterator[tuple[str, StageReport]]:
    """The selected stages of one run in the data's order, each report as its stage ends
    (the caller holds the run's lock; a stage that fails ends the step).

    What the stages of one step share is made here: the run's files fingerprinted once,
    before the first stage reads them, the prompt spec loaded once, and the prompts the
    states stage renders for a prompts stage that follows it.
    """
    wanted = frozenset(assets)
    fingerprint = None
    spec, bad_spec = None, None
    if PROMPTS in wanted:
        try:
            spec = settings.prompt_spec()
        except (StatepoolError, OSError) as exc:  # raised by the prompts stage: those before run
            bad_spec = exc
    handover = RenderedPrompts(spec) if spec is not None and STATES in wanted else None
    for asset in RUN_ASSETS:
        if asset not in wanted:
            continue
        try:
            if asset in (EPISODES, SNAPSHOTS):
                if fingerprint is None:  # before any stage reads: marks never newer than data
                    fingerprint = fingerprint_run(run_folder(settings, run))
                build = build_episodes if asset == EPISODES else build_snapshots
                report = build(run, settings, tables, fingerprint)
            elif asset == STATES:
                report = build_states(run, settings, tables, handover)
            elif bad_spec is not None:
                raise bad_spec
            else:
                assert spec is not None  # loaded above whenever the prompts stage is wanted
                report = build_prompts(run, tables, spec, handover)
        finally:
            release_if_large()  # the memory Arrow kept from the stage: the next starts lean
        yield asset, report


def build_run(
    settings: Settings, run: str, assets: Iterable[str] = RUN_ASSETS
) -> dict[str, StageReport]:
    """The selected stages of one run, in the data's order (the core path, without Dagster)."""
    layout = StoreLayout(settings.store_dir)
    with layout.lock(run), without_cyclic_gc():
        return dict(build_stages(run, settings, OpenTables(layout), assets))


def run_each(
    task: RunTask[T], settings: Settings, runs: Sequence[str], workers: int = 0
) -> list[T]:
    """``task`` for every run, on up to ``workers`` processes (0: one per core)."""
    return [result for ready in stream_each(task, settings, runs, workers) for result in ready]


def stream_each(
    task: RunTask[T], settings: Settings, runs: Sequence[str], workers: int = 0
) -> Iterator[list[T]]:
    """``run_each``'s results in run order, as they come: each time, the next one (waited
    for) and every one after it already done.

    Each run's task gets the run, the settings and the tables it opens, under the run's
    store lock; a worker gets only the task, the run and the settings (picklable, no cache).
    A caller can write what it gets in one go and never waits while holding it; the pool
    builds on meanwhile. Closing the iterator early, or a signal, hands no further run to a
    worker and stops the running ones; an error waits for them.
    """
    return _pool_stream(_locked, [(task, run, settings) for run in runs], workers)


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
    before = set(multiprocessing.active_children())
    try:
        futures = deque(pool.submit(fn, task) for task in tasks)
        while futures:
            ready = [futures.popleft().result()]
            while futures and futures[0].done():
                ready.append(futures.popleft().result())
            yield ready
    except BaseException as stop:  # no further task
        pool.shutdown(wait=False, cancel_futures=True)
        # A signal, or the stream closed early (Dagster raises a signal's interrupt in the
        # step between two reads of it): the running tasks are stopped too.
        if not isinstance(stop, Exception):
            _stop_workers(set(multiprocessing.active_children()) - before)
        raise
    finally:
        pool.shutdown(wait=True)
        # After a shutdown without waiting, Python's own wait returns at once: the workers
        # are waited for here, so no task outlives the stream (nor the store locks it holds).
        for worker in set(multiprocessing.active_children()) - before:
            worker.join()


def _stop_workers(workers: set[multiprocessing.process.BaseProcess]) -> None:
    """SIGTERM to ``workers`` (each unwinds, removing its temporary files); SIGKILL to the ones
    still there after :data:`STOP_GRACE_SECONDS`."""
    for worker in workers:
        worker.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()


def _locked(work: tuple[RunTask[T], str, Settings]) -> T:
    """One run's task under the run's store lock: two writers never interleave."""
    task, run, settings = work
    layout = StoreLayout(settings.store_dir)
    with layout.lock(run), without_cyclic_gc():
        return task(run, settings, OpenTables(layout))


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
    # The parent's wakeup pipe (``statepool sync``'s signal watch) is the parent's alone.
    signal.set_wakeup_fd(-1)
    prctl = libc_function("prctl")
    if prctl is not None:  # elsewhere the check below still catches a parent already gone
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
