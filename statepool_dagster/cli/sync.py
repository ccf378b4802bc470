"""``statepool sync``: the code location's sensors ticked once, what they ask for built here.

The runs, sessions and feedback sensors' tick functions (``defs/<domain>/sensors.py``)
decide, as they do for the daemon; the partitions they add are added and the runs they request
executed with the code location's jobs (``launch.py``). Requested runs of consecutive
partitions are built together, one Dagster run over their range, as a single-run backfill
does. Concurrent syncs and the daemon's runs share the work (``claims.py``); a signal stops
the sync between runs (``interrupts.py``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from dagster import DagsterInstance

from ..core.config import Settings
from ..core.names import FINAL_ASSET, SESSIONS_JOB, STATE_STATS, STATE_STATS_JOB
from ..core.runs.changes import SyncPlan
from ..core.store.layout import StoreLayout
from ..defs.feedback.sensors import feedback_tick
from ..defs.runs.sensors import runs_tick
from ..defs.sessions.sensors import sessions_tick
from ..defs.tags import CHANGE, NEW_SEGMENTS, SOURCE_FINGERPRINT, SYNC_PID
from .claims import Target, built_elsewhere, partitions_under_way, wait_for_runs
from .interrupts import raise_if_signalled
from .launch import add_partitions, run_job, run_partitions
from .outcomes import (
    FeedbackOutcome,
    RunOutcome,
    SessionOutcome,
    SyncSummary,
    count,
    first_error,
    materialized,
    run_outcome,
)

# Runs per Dagster run. Each run costs Dagster a fixed amount however many partitions it
# covers (creating it, its plan, its start and end events, its step's worker pool; figures
# on the performance page): fewer runs spend less, while progress still shows between
# batches; a run that fails in a batch is retried alone, so a failure costs little.
BATCH_SIZE = 96


def materialize_runs(
    instance: DagsterInstance, settings: Settings, targets: list[Target], log_level: str
) -> list[RunOutcome]:
    """Materialize consecutive partitions in one run; the runs it could not build, each alone.

    A batch records every run it built even when another fails; the failed ones are run
    again alone, so each reports its own error. Runs another process built meanwhile (seen
    once their store locks are held) are skipped (``claims.py``).
    """
    layout = StoreLayout(settings.store_dir)
    started = time.perf_counter()
    with contextlib.ExitStack() as locks:
        # Held by this process, the locks would block the steps elsewhere (Celery workers),
        # which take each run's lock themselves for every stage.
        if settings.executor == "in_process":
            for target in targets:  # in key order, as every sync takes them: no deadlock
                locks.enter_context(layout.lock(target.run))
        elsewhere = built_elsewhere(instance, targets)
        if elsewhere:
            skipped = [RunOutcome(t.run, t.status, True, elsewhere=True) for t in targets]
            todo = [t for t in targets if t.run not in elsewhere]
            order = [t.run for t in targets]
            built: dict[str, RunOutcome] = {}
            for batch in batches(todo, order):  # the locks are re-entrant
                outcomes = materialize_runs(instance, settings, batch, log_level)
                built.update((o.run, o) for o in outcomes)
            return [built.get(o.run, o) for o in skipped]
        one = {SOURCE_FINGERPRINT: targets[0].fingerprint, CHANGE: targets[0].status}
        partitions = [t.run for t in targets]
        result = run_partitions(instance, settings, partitions, one, log_level)
    raise_if_signalled()  # a stopped sync neither goes on nor retries one by one
    found = materialized(result)
    share = (time.perf_counter() - started) / len(targets)
    outcomes = []
    for target in targets:
        if result.success or (FINAL_ASSET, target.run) in found:
            outcomes.append(run_outcome(found, target.run, target.status, share))
        elif len(targets) > 1:
            outcomes.extend(materialize_runs(instance, settings, [target], log_level))
        else:
            error = first_error(result)
            outcomes.append(RunOutcome(target.run, target.status, False, error=error))
    return outcomes


def batches(targets: list[Target], order: list[str], size: int = BATCH_SIZE):
    """Split ``targets`` into runs of consecutive partitions (in the instance's key order)."""
    position = {key: i for i, key in enumerate(order)}
    batch: list[Target] = []
    for target in sorted(targets, key=lambda t: position[t.run]):
        if batch and (len(batch) >= size or position[target.run] != position[batch[-1].run] + 1):
            yield batch
            batch = []
        batch.append(target)
    if batch:
        yield batch


def fail_orphaned_runs(instance: DagsterInstance) -> list[str]:
    """Mark failed the runs of an earlier ``statepool sync`` that was killed mid-run.

    Left as STARTED they would hold their partition's slot in the run queue forever.
    """
    from dagster import DagsterRunStatus, RunsFilter

    unfinished = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
    failed = []
    for run in instance.get_runs(RunsFilter(statuses=unfinished)):
        pid = run.tags.get(SYNC_PID)
        if pid is None or _alive(int(pid)):
            continue
        instance.report_run_failed(run, message=f"the statepool sync running it (pid {pid}) died")
        failed.append(run.run_id)
    return failed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build_runs(
    instance: DagsterInstance,
    settings: Settings,
    targets: list[Target],
    on_outcome: Callable[[RunOutcome], None],
    log_level: str,
    batch_size: int,
) -> None:
    """Every target built, a batch of consecutive partitions at a time."""
    from ..core.names import RUNS

    order = instance.get_dynamic_partitions(RUNS)
    # Partitions another process's run is building: last, once that run is over.
    under_way = partitions_under_way(instance, order)
    first = [t for t in targets if t.run not in under_way]
    last = [t for t in targets if t.run in under_way]
    # The report counts its figures where it is built (report/cache.py keeps them there).
    for group in (first, last):
        if group is last and last:
            wait_for_runs(instance, {under_way[t.run] for t in last})
        for batch in batches(group, order, batch_size):
            raise_if_signalled()
            for outcome in materialize_runs(instance, settings, batch, log_level):
                on_outcome(outcome)


def sync_sessions(instance: DagsterInstance, settings: Settings, log_level: str = "ERROR"):
    """The sessions sensor's requests built: each session with sealed segments not built."""
    tick = sessions_tick(instance, settings, None)
    add_partitions(instance, tick.result)
    outcomes = []
    for request in tick.result.run_requests or ():
        raise_if_signalled()
        session = request.partition_key
        result = run_job(instance, SESSIONS_JOB, log_level, session, dict(request.tags))
        error = "" if result.success else first_error(result)
        pending = int(request.tags.get(NEW_SEGMENTS, 0))
        outcomes.append(SessionOutcome(session, pending, result.success, error))
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
    result = run_job(instance, STATE_STATS_JOB, log_level, run_config=config)
    meta = materialized(result).get((STATE_STATS, None))
    return FeedbackOutcome(
        ran=True,
        ok=result.success,
        records=count(meta, "new_records"),
        segments=count(meta, "new_segments"),
        states=count(meta, "states"),
        bad_lines=count(meta, "new_bad_lines"),
        error="" if result.success else first_error(result),
    )


def sync(
    instance: DagsterInstance,
    settle_seconds: float = 0.0,
    on_plan: Callable[[SyncPlan], None] | None = None,
    on_outcome: Callable[[RunOutcome], None] | None = None,
    log_level: str = "WARNING",
    batch_size: int = BATCH_SIZE,
) -> SyncSummary:
    """What the runs, sessions and feedback sensors ask for, built now; never stops at a failure.

    Settings come from the environment, as the jobs' runs read them (``settle_seconds``
    instead of ``STATEPOOL_SETTLE_SECONDS``: a sync builds what it finds).
    """
    settings = Settings.from_env()
    fail_orphaned_runs(instance)
    tick = runs_tick(instance, settings.model_copy(update={"settle_seconds": settle_seconds}))
    add_partitions(instance, tick.result)
    assert tick.plan is not None
    if on_plan:
        on_plan(tick.plan)
    summary = SyncSummary(tick.plan)
    targets = [
        Target(r.partition_key, r.tags[SOURCE_FINGERPRINT], r.tags[CHANGE])
        for r in tick.result.run_requests or ()
    ]

    def outcome(done: RunOutcome) -> None:
        summary.outcomes.append(done)
        if on_outcome:
            on_outcome(done)

    if targets:  # an idle sync: no more queries, nothing of the report (nor Arrow)
        build_runs(instance, settings, targets, outcome, log_level, batch_size)
    summary.sessions = sync_sessions(instance, settings, log_level)
    summary.feedback = fold_feedback(instance, settings, log_level)
    return summary
