"""``statepool sync``: the sensors' ticks say what to run; their requests run here, on Dagster.

The runs, sessions and feedback sensors' ticks decide, as for the daemon; the code location's
jobs run their requests (``execute_in_process``, or ``execute_job`` for Celery), consecutive
partitions as one run over their range. A partition is built once however syncs and the
daemon's runs interleave: a sync holds its batch's store locks, asks the instance again what each
run was last built from, and leaves the partitions of another process's run under way to its end.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence

from dagster import DagsterInstance, DagsterRunStatus, RunRequest, RunsFilter

from ..core import Settings, names
from ..core.runs import SyncPlan
from ..core.store import StoreLayout
from ..defs import tags
from ..defs.feedback.sensors import feedback_tick
from ..defs.results import built_counts, first_error, materialized
from ..defs.runs.fingerprints import recorded_fingerprints
from ..defs.runs.sensors import runs_tick
from ..defs.sessions.sensors import sessions_tick
from .console import FeedbackOutcome, RunOutcome, SessionOutcome, SyncSummary
from .interrupts import raise_if_signalled

# Runs per Dagster run: each costs Dagster a fixed amount however many partitions it covers
# (performance page), and progress still shows between batches.
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
    Settings as the jobs' runs read them, but ``settle_seconds``: a sync builds what it finds."""
    settings = Settings.from_env()
    # A killed sync's runs, left as started, would hold their partition's run-queue slot forever.
    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.NOT_STARTED, *UNDER_WAY])):
        pid = run.tags.get(tags.SYNC_PID)
        if pid is not None and not _alive(int(pid)):
            instance.report_run_failed(run, message=f"its statepool sync (pid {pid}) died")
    tick = runs_tick(instance, settings.model_copy(update={"settle_seconds": settle_seconds}))
    requests = _requested(instance, tick.result)
    on_plan(tick.plan)
    summary = SyncSummary(tick.plan)
    if requests:  # an idle sync: no more queries, nothing of the report (nor Arrow)
        position = {key: i for i, key in enumerate(instance.get_dynamic_partitions(names.RUNS))}
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
    raise_if_signalled()  # a signal during the last run stops the sync too
    return summary


def sync_sessions(instance: DagsterInstance, settings: Settings, log_level: str = "ERROR"):
    """The sessions sensor's requests built: each session with sealed segments not built."""
    outcomes = []
    for request in _requested(instance, sessions_tick(instance, settings, None).result):
        raise_if_signalled()
        session, pending = request.partition_key, int(request.tags.get(tags.NEW_SEGMENTS, 0))
        result = execute(instance, names.SESSIONS_JOB, log_level, [session], request.tags)
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
    result = execute(instance, names.STATE_STATS_JOB, log_level, run_config=config)
    metadata = materialized(result).get((names.STATE_STATS, None), {})
    counts = {f: int(metadata[k].value) for f, k in FeedbackOutcome.COUNTS.items() if k in metadata}
    return FeedbackOutcome(ran=True, ok=result.success, error=first_error(result), **counts)


def execute(
    instance: DagsterInstance,
    job: str,
    log_level: str,
    partitions: Sequence[str] = (),
    run_tags: dict[str, str] | None = None,
    run_config: dict | None = None,
    executor: str = "in_process",
):
    """One run of the code location's ``job`` over ``partitions`` (none, one, or consecutive
    ones as a range), from this process; its result (never raises).

    With another executor than ``in_process``, only the runs' job (``JOB``) can run: its steps
    go where the executor sends them.
    """
    from ..definitions import defs, statepool_job

    config = {"loggers": {"console": {"config": {"log_level": log_level}}}, **(run_config or {})}
    run_tags = {**(run_tags or {}), tags.SYNC_PID: str(os.getpid())}
    if len(partitions) == 1:
        run_tags[tags.PARTITION] = partitions[0]
    elif partitions:  # a range, in Dagster's own tags, as a backfill writes them
        run_tags[tags.PARTITION_RANGE_START] = partitions[0]
        run_tags[tags.PARTITION_RANGE_END] = partitions[-1]
    run = {"run_config": config, "tags": run_tags}
    if executor == "in_process":
        # The partition given as such, not as a tag alone: checked, and tagged as the daemon's.
        job_def = defs().resolve_job_def(job)
        partition = run_tags.get(tags.PARTITION)
        return job_def.execute_in_process(
            instance=instance, raise_on_error=False, partition_key=partition, **run
        )
    if job != names.JOB:
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
    """``batch`` (consecutive partitions) built; runs another process built meanwhile skipped.

    A run records every run it built even when another fails; the failed ones run again alone,
    so each reports its own error."""
    started = time.perf_counter()
    with contextlib.ExitStack() as locks:
        # Held by this process, the locks would block the steps elsewhere (Celery workers),
        # which take each run's lock themselves for every stage.
        if settings.executor == "in_process":
            layout = StoreLayout(settings.store_dir)
            for request in batch:  # in key order, as every sync takes them: no deadlock
                locks.enter_context(layout.lock(request.partition_key))  # re-entrant
        recorded = recorded_fingerprints(instance)
        outcomes = {
            r.partition_key: RunOutcome(r.partition_key, r.tags[tags.CHANGE], True, elsewhere=True)
            for r in batch
            if recorded.get(r.partition_key) == r.tags[tags.SOURCE_FINGERPRINT]
        }
        for part in _batches([r for r in batch if r.partition_key not in outcomes], position):
            raise_if_signalled()  # a stopped sync neither goes on nor retries one by one
            keys = [r.partition_key for r in part]
            one = part[0].tags if len(part) == 1 else None
            result = execute(instance, names.JOB, log_level, keys, one, executor=settings.executor)
            raise_if_signalled()
            found = materialized(result)
            seconds = (time.perf_counter() - started) / len(batch)
            for request in part:
                run, change = request.partition_key, request.tags[tags.CHANGE]
                if result.success or (names.FINAL_ASSET, run) in found:
                    outcomes[run] = RunOutcome(
                        run, change, True, *built_counts(found, run), seconds
                    )
                elif len(part) > 1:
                    (outcomes[run],) = _build(instance, settings, [request], position, log_level)
                else:
                    outcomes[run] = RunOutcome(run, change, False, error=first_error(result))
    return [outcomes[request.partition_key] for request in batch]


def _batches(requests: list[RunRequest], position: dict[str, int], size: int = BATCH_SIZE):
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
    for run in instance.get_runs(RunsFilter(job_name=names.JOB, statuses=UNDER_WAY)):
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
        with contextlib.suppress(PermissionError):  # another user's process: alive
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
