"""``statepool sync``: the sensors' ticks say what to run; their requests run here, on Dagster.

The runs, sessions and feedback sensors' tick functions (``defs/<domain>/sensors.py``) decide,
as for the daemon; their requests run with the code location's jobs (``execute_in_process``, or
``execute_job`` with ``STATEPOOL_EXECUTOR=celery``), consecutive partitions as one run over their
range. A partition is built once however syncs and the daemon's runs interleave: a sync holds the
store locks of a batch's runs, asks the instance again what each was last built from, and leaves
the partitions of another process's run under way to its end, once that run is over.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from dagster import DagsterInstance, DagsterRunStatus, RunRequest, RunsFilter

from ..core import Settings
from ..core.names import FINAL_ASSET, JOB, RUNS, SESSIONS_JOB, STATE_STATS_JOB
from ..core.runs import SyncPlan
from ..core.store import StoreLayout
from ..defs import tags
from ..defs.feedback.sensors import feedback_tick
from ..defs.runs.fingerprints import recorded_fingerprints
from ..defs.runs.sensors import runs_tick
from ..defs.sessions.sensors import sessions_tick
from .interrupts import raise_if_signalled
from .outcomes import (
    FeedbackOutcome,
    RunOutcome,
    SessionOutcome,
    SyncSummary,
    feedback_outcome,
    first_error,
    materialized,
    run_outcome,
)

# Runs per Dagster run. Each run costs Dagster a fixed amount however many partitions it
# covers (figures on the performance page): fewer runs spend less, while progress still shows
# between batches; a run that fails in a batch is retried alone, so a failure costs little.
BATCH_SIZE = 96
BUSY_POLL_SECONDS = 0.5
BUSY_WAIT_SECONDS = 600.0  # then build anyway: the store locks still keep writers apart
UNDER_WAY = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def sync(
    instance: DagsterInstance,
    settle_seconds: float = 0.0,
    on_plan: Callable[[SyncPlan], None] = lambda plan: None,
    on_outcome: Callable[[RunOutcome], None] = lambda outcome: None,
    log_level: str = "WARNING",
    batch_size: int = BATCH_SIZE,
) -> SyncSummary:
    """What the runs, sessions and feedback sensors ask for, built now; never stops at a failure.

    Settings come from the environment, as the jobs' runs read them (``settle_seconds``
    instead of ``STATEPOOL_SETTLE_SECONDS``: a sync builds what it finds).
    """
    settings = Settings.from_env()
    # A killed sync's runs, left as started, would hold their partition's run-queue slot forever.
    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.NOT_STARTED, *UNDER_WAY])):
        pid = run.tags.get(tags.SYNC_PID)
        if pid is not None and not _alive(int(pid)):
            died = f"the statepool sync running it (pid {pid}) died"
            instance.report_run_failed(run, message=died)
    tick = runs_tick(instance, settings.model_copy(update={"settle_seconds": settle_seconds}))
    requests = _requested(instance, tick.result)
    on_plan(tick.plan)
    summary = SyncSummary(tick.plan)
    if requests:  # an idle sync: no more queries, nothing of the report (nor Arrow)
        position = {key: i for i, key in enumerate(instance.get_dynamic_partitions(RUNS))}
        busy = _under_way(instance, position)
        # Partitions another process's run is building: last, once that run is over.
        requests.sort(key=lambda r: (r.partition_key in busy, position[r.partition_key]))
        for batch in _batches(requests, position, batch_size):
            raise_if_signalled()
            _wait_for(instance, {busy[r.partition_key] for r in batch if r.partition_key in busy})
            for outcome in _build(instance, settings, batch, position, log_level):
                summary.outcomes.append(outcome)
                on_outcome(outcome)
    summary.sessions = sync_sessions(instance, settings, log_level)
    summary.feedback = fold_feedback(instance, settings, log_level)
    return summary


def sync_sessions(instance: DagsterInstance, settings: Settings, log_level: str = "ERROR"):
    """The sessions sensor's requests built: each session with sealed segments not built."""
    outcomes = []
    for request in _requested(instance, sessions_tick(instance, settings, None).result):
        raise_if_signalled()
        session, pending = request.partition_key, int(request.tags.get(tags.NEW_SEGMENTS, 0))
        result = execute(
            instance, SESSIONS_JOB, log_level, {**request.tags, tags.PARTITION: session}
        )
        outcomes.append(SessionOutcome(session, pending, result.success, first_error(result)))
    return outcomes


def fold_feedback(
    instance: DagsterInstance, settings: Settings, log_level: str = "ERROR", force: bool = False
) -> FeedbackOutcome:
    """``state_stats`` materialized when the feedback sensor asks for it (or ``force``)."""
    if not (force or feedback_tick(instance, settings).result.run_requests):
        return FeedbackOutcome()
    raise_if_signalled()
    store = {"store_dir": settings.store_dir, "feedback_dir": settings.feedback_dir}
    config = {"resources": {"statepool": {"config": {k: v for k, v in store.items() if v}}}}
    return feedback_outcome(execute(instance, STATE_STATS_JOB, log_level, run_config=config))


def execute(
    instance: DagsterInstance,
    job: str,
    log_level: str,
    run_tags: dict[str, str] | None = None,
    run_config: dict | None = None,
    executor: str = "in_process",
):
    """One run of the code location's ``job``, from this process; its result (never raises).

    With another executor than ``in_process``, only the runs' job (``JOB``) can run: its steps
    go where the executor sends them.
    """
    from ..definitions import defs, statepool_job

    config = {"loggers": {"console": {"config": {"log_level": log_level}}}, **(run_config or {})}
    run = {"run_config": config, "tags": {**(run_tags or {}), tags.SYNC_PID: str(os.getpid())}}
    if executor == "in_process":
        job_def = defs().resolve_job_def(job)
        # The partition given as such, not as a tag alone: checked, and tagged as the daemon's.
        partition = run["tags"].get(tags.PARTITION)
        return job_def.execute_in_process(
            instance=instance, raise_on_error=False, partition_key=partition, **run
        )
    if job != JOB:
        raise ValueError(f"{job} runs in process only, not with the {executor!r} executor")
    # execute_in_process ignores the job's executor; any other needs a job it can rebuild
    # elsewhere (a Celery worker loads it from the definitions module's pointer).
    from dagster import execute_job, reconstructable

    return execute_job(reconstructable(statepool_job), instance, raise_on_error=False, **run)


def _build(
    instance: DagsterInstance,
    settings: Settings,
    batch: list[RunRequest],
    position: dict[str, int],
    log_level: str,
) -> list[RunOutcome]:
    """``batch`` (consecutive partitions) built in one run; the runs it did not build, alone.

    A batch records every run it built even when another fails; the failed ones run again
    alone, so each reports its own error. Runs another process built meanwhile are skipped,
    the others built again in batches of consecutive partitions.
    """
    started = time.perf_counter()
    with contextlib.ExitStack() as locks:
        # Held by this process, the locks would block the steps elsewhere (Celery workers),
        # which take each run's lock themselves for every stage.
        if settings.executor == "in_process":
            layout = StoreLayout(settings.store_dir)
            for request in batch:  # in key order, as every sync takes them: no deadlock
                locks.enter_context(layout.lock(request.partition_key))
        recorded = recorded_fingerprints(instance)
        done = [
            r for r in batch if recorded.get(r.partition_key) == r.tags[tags.SOURCE_FINGERPRINT]
        ]
        first, last = batch[0].partition_key, batch[-1].partition_key
        ranged = {tags.PARTITION_RANGE_START: first, tags.PARTITION_RANGE_END: last}
        run_tags = {**batch[0].tags, tags.PARTITION: first} if len(batch) == 1 else ranged
        if done:  # the locks are re-entrant: the runs left take them again
            todo = [r for r in batch if r not in done]
            rest = _batches(todo, position, len(batch))
            built = {
                o.run: o for b in rest for o in _build(instance, settings, b, position, log_level)
            }
            return [
                RunOutcome(r.partition_key, r.tags[tags.CHANGE], True, elsewhere=True)
                if r in done
                else built[r.partition_key]
                for r in batch
            ]
        result = execute(instance, JOB, log_level, run_tags, executor=settings.executor)
    raise_if_signalled()  # a stopped sync neither goes on nor retries one by one
    found = materialized(result)
    seconds = (time.perf_counter() - started) / len(batch)
    outcomes = []
    for request in batch:
        run, change = request.partition_key, request.tags[tags.CHANGE]
        if result.success or (FINAL_ASSET, run) in found:
            outcomes.append(run_outcome(found, run, change, seconds))
        elif len(batch) > 1:
            outcomes += _build(instance, settings, [request], position, log_level)
        else:
            outcomes.append(RunOutcome(run, change, False, error=first_error(result)))
    return outcomes


def _batches(requests: list[RunRequest], position: dict[str, int], size: int):
    """``requests`` cut into runs of consecutive partitions (``position``: the instance's order)."""
    batch: list[RunRequest] = []
    for request in requests:
        at = position[request.partition_key]
        if batch and (len(batch) >= size or at != position[batch[-1].partition_key] + 1):
            yield batch
            batch = []
        batch.append(request)
    if batch:
        yield batch


def _requested(instance: DagsterInstance, result) -> list[RunRequest]:
    """A sensor result's run requests, its partitions added first (as the daemon does)."""
    for request in result.dynamic_partitions_requests or ():
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    return list(result.run_requests or ())


def _under_way(instance: DagsterInstance, position: dict[str, int]) -> dict[str, str]:
    """``{partition: run id}`` of the runs' job's runs another process is executing; a run names
    its partition or its range (read in the instance's key order)."""
    order = list(position)
    found: dict[str, str] = {}
    for run in instance.get_runs(RunsFilter(job_name=JOB, statuses=UNDER_WAY)):
        first = run.tags.get(tags.PARTITION_RANGE_START, run.tags.get(tags.PARTITION))
        last = run.tags.get(tags.PARTITION_RANGE_END, first)
        if run.tags.get(tags.SYNC_PID) != str(os.getpid()) and {first, last} <= position.keys():
            found.update(dict.fromkeys(order[position[first] : position[last] + 1], run.run_id))
    return found


def _wait_for(instance: DagsterInstance, run_ids: set[str]) -> None:
    """Return once none of ``run_ids`` is under way any more (or after the longest wait)."""
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    under_way = RunsFilter(run_ids=list(run_ids), statuses=UNDER_WAY) if run_ids else None
    while under_way and time.monotonic() < deadline and instance.get_runs(under_way, limit=1):
        raise_if_signalled()
        time.sleep(BUSY_POLL_SECONDS)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True
