"""``statepool sync``: what the sensor does, run once and synchronously in the local instance."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import DagsterInstance
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)

from ..core.names import (
    FINAL_ASSET,
    IGNORED_METADATA,
    JOB,
    REJECT_COUNTS,
    STATE_COUNT,
    STATES,
    Change,
)
from ..core.runs.changes import RunChange, SyncPlan, plan_sync
from ..core.runs.files import discover_runs
from ..core.store.layout import StoreLayout
from ..defs.fingerprints import recorded_fingerprints
from ..defs.partitions import RUNS
from ..defs.resources import statepool_settings
from ..defs.tags import SOURCE_FINGERPRINT, SYNC_PID
from .claims import built_elsewhere, partitions_under_way, wait_for_runs
from .interrupts import raise_if_signalled


@dataclass
class RunOutcome:
    """How one run's materialization went."""

    run: str
    status: str  # the plan's status: new | changed
    success: bool
    states: int = 0
    rejects: int = 0
    ignored: int = 0  # files in the run folder passed over (name, duplicate), each with a reason
    seconds: float = 0.0
    error: str | None = None
    elsewhere: bool = False  # built meanwhile by another sync or run: skipped here


@dataclass
class SyncSummary:
    """Everything ``statepool sync`` reports."""

    plan: SyncPlan
    outcomes: list[RunOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if not o.success]

    @property
    def states_written(self) -> int:
        return sum(o.states for o in self.outcomes if o.success)

    def counts(self) -> dict[str, int]:
        plan = self.plan
        return {
            "seen": len(plan.runs),
            **{change.value: len(plan.with_status(change)) for change in Change},
            "invalid": len(plan.invalid),
            "failed": len(self.failed),
            "states_written": self.states_written,
        }


# Runs per Dagster run. Each run costs Dagster a fixed ~0.15 s (creating it, its plan, its
# start and end events): 48 keeps that under 4 ms a partition while progress still shows
# every few seconds; a run that fails in a batch is retried alone, so a failure costs little.
BATCH_SIZE = 48


def _materialized(result) -> dict[tuple[str, str | None], dict]:
    """``{(asset, run): metadata}`` of every materialization ``result`` recorded."""
    found = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        key = (materialization.asset_key.to_user_string(), materialization.partition)
        found[key] = materialization.metadata
    return found


def _count(metadata: dict | None, key: str) -> int:
    return int(metadata[key].value) if metadata and key in metadata else 0


def _ignored_files(result, run: str) -> int:
    """How many files the run's materializations list as ignored (JSON metadata, by name)."""
    total = 0
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        for asset, key in IGNORED_METADATA:
            if (
                materialization.asset_key.to_user_string() == asset
                and materialization.partition == run
                and key in materialization.metadata
            ):
                total += len(materialization.metadata[key].value or {})
    return total


def _first_error(result) -> str:
    """The root cause of the first failed step, without Dagster's wrapping."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error:
            error = event.step_failure_data.error
            while error.cause is not None:
                error = error.cause
            message = error.message.strip()
            prefix = f"{error.cls_name}: "
            if prefix in message:
                message = message.split(prefix, 1)[1]
            return message.splitlines()[0] if message else error.cls_name
    return "run failed"


def _execute(instance: DagsterInstance, targets: list[RunChange], log_level: str):
    """One Dagster run over ``targets`` (consecutive partitions), with the job's executor."""
    from ..definitions import defs

    job = defs.resolve_job_def(JOB)
    first, last = targets[0].run.name, targets[-1].run.name
    if len(targets) == 1:
        partition = {"partition_key": first}
        tags = {SOURCE_FINGERPRINT: targets[0].fingerprint.digest}
    else:
        partition = {}
        tags = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
    tags[SYNC_PID] = str(os.getpid())
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    if in_process():
        return job.execute_in_process(
            instance=instance,
            tags=tags,
            raise_on_error=False,
            run_config=run_config,
            **partition,
        )
    # execute_in_process ignores the job's executor; any other needs a job it can rebuild
    # elsewhere (a Celery worker loads it from this module pointer).
    from dagster import execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    repository = ReconstructableRepository.for_module("statepool_dagster.definitions", "defs")
    if partition:
        tags[PARTITION_NAME_TAG] = first
    return execute_job(
        repository.get_reconstructable_job(job.name),
        instance,
        run_config=run_config,
        tags=tags,
        raise_on_error=False,
    )


def in_process() -> bool:
    """Whether the jobs run their steps in this process (``STATEPOOL_EXECUTOR=in_process``)."""
    from dagster import in_process_executor

    from ..defs.jobs import RUN_EXECUTOR

    return RUN_EXECUTOR is in_process_executor


def materialize_runs(
    instance: DagsterInstance, targets: list[RunChange], log_level: str = "WARNING"
) -> list[RunOutcome]:
    """Materialize consecutive partitions in one run; the runs it could not build, each alone.

    A batch records every run it built even when another fails; the failed ones are run
    again alone, so each reports its own error. Runs another process built meanwhile (seen
    once their store locks are held) are skipped (``claims.py``).
    """
    layout = StoreLayout(statepool_settings.settings().store_dir)
    started = time.perf_counter()
    with contextlib.ExitStack() as locks:
        # Held by this process, the locks would block the steps elsewhere (Celery workers),
        # which take each run's lock themselves for every stage.
        if in_process():
            for target in targets:  # in key order, as every sync takes them: no deadlock
                locks.enter_context(layout.lock(target.run.name))
        elsewhere = built_elsewhere(instance, targets)
        if elsewhere:
            skipped = [RunOutcome(t.run.name, t.status, True, elsewhere=True) for t in targets]
            todo = [t for t in targets if t.run.name not in elsewhere]
            order = [t.run.name for t in targets]
            built = {}
            for batch in batches(todo, order):  # the locks are re-entrant
                built.update((o.run, o) for o in materialize_runs(instance, batch, log_level))
            return [built.get(o.run, o) for o in skipped]
        result = _execute(instance, targets, log_level)
    raise_if_signalled()  # a stopped sync neither goes on nor retries one by one
    materialized = _materialized(result)
    share = (time.perf_counter() - started) / len(targets)
    outcomes = []
    for target in targets:
        run = target.run.name
        built = result.success or (FINAL_ASSET, run) in materialized
        if not built and len(targets) > 1:
            outcomes.extend(materialize_runs(instance, [target], log_level))
            continue
        outcome = RunOutcome(run, target.status, built, seconds=share)
        if built:
            outcome.states = _count(materialized.get((STATES, run)), STATE_COUNT)
            outcome.rejects = sum(
                _count(materialized.get((asset, run)), key) for asset, key in REJECT_COUNTS
            )
            outcome.ignored = _ignored_files(result, run)
        else:
            outcome.error = _first_error(result)
        outcomes.append(outcome)
    return outcomes


def batches(targets: list[RunChange], order: list[str], size: int = BATCH_SIZE):
    """Split ``targets`` into runs of consecutive partitions (in the instance's key order)."""
    position = {key: i for i, key in enumerate(order)}
    batch: list[RunChange] = []
    for target in sorted(targets, key=lambda t: position[t.run.name]):
        if batch and (
            len(batch) >= size or position[target.run.name] != position[batch[-1].run.name] + 1
        ):
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


def sync(
    instance: DagsterInstance,
    settle_seconds: float = 0.0,
    on_plan: Callable[[SyncPlan], None] | None = None,
    on_outcome: Callable[[RunOutcome], None] | None = None,
    log_level: str = "WARNING",
    batch_size: int = BATCH_SIZE,
) -> SyncSummary:
    """Register new runs and materialize new and changed ones; never stops at a failure.

    Settings come from the code location's settings resource, as the job's runs read them.
    Consecutive partitions are built together in one Dagster run (``batch_size`` at most),
    asset checks included. Runs another sync or a launched run is building are not built
    twice (``claims.py``).
    """
    settings = statepool_settings.settings()
    fail_orphaned_runs(instance)
    plan = plan_sync(
        discover_runs(settings.runs_dir),
        known_keys=instance.get_dynamic_partitions(RUNS),
        recorded=recorded_fingerprints(instance),
        now=time.time(),
        settle_seconds=settle_seconds,
    )
    if plan.new_keys:
        instance.add_dynamic_partitions(RUNS, plan.new_keys)
    if on_plan:
        on_plan(plan)
    summary = SyncSummary(plan)
    if not plan.to_materialize:
        return summary  # an idle sync: no more queries, nothing of the report (nor Arrow)
    order = instance.get_dynamic_partitions(RUNS)
    # Partitions another process's run is building: last, once that run is over.
    under_way = partitions_under_way(instance, order)
    first = [t for t in plan.to_materialize if t.run.name not in under_way]
    last = [t for t in plan.to_materialize if t.run.name in under_way]
    from ..core.report.cache import FiguresWarmer

    # The report's figures of each batch's runs, counted while the next batch is built.
    warmer = FiguresWarmer(settings.store_dir)
    finished = False
    try:
        for targets in (first, last):
            if targets is last and last:
                wait_for_runs(instance, {under_way[t.run.name] for t in last})
            for batch in batches(targets, order, batch_size):
                raise_if_signalled()
                built = []
                for outcome in materialize_runs(instance, batch, log_level):
                    summary.outcomes.append(outcome)
                    if outcome.success and not outcome.elsewhere:
                        built.append(outcome.run)
                    if on_outcome:
                        on_outcome(outcome)
                warmer.add(built)
        finished = True
    finally:
        warmer.close(finish=finished)
    return summary
