"""``statepool sync``: what the sensor does, run once and synchronously in the local instance."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dagster import DagsterInstance

from .core.run_files import discover_runs
from .core.settings import Settings
from .core.store import StoreLayout
from .core.sync_plan import RunStatus, SyncPlan, plan_sync
from .fingerprints import recorded_fingerprints
from .partitions import RUNS
from .tags import SOURCE_FINGERPRINT


@dataclass
class RunOutcome:
    """How one run's materialization went."""

    run: str
    status: str  # the plan's status: new | changed
    success: bool
    states: int = 0
    rejects: int = 0
    seconds: float = 0.0
    error: str | None = None


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
            "new": len(plan.with_status("new")),
            "changed": len(plan.with_status("changed")),
            "unchanged": len(plan.with_status("unchanged")),
            "settling": len(plan.with_status("settling")),
            "invalid": len(plan.invalid),
            "failed": len(self.failed),
            "states_written": self.states_written,
        }


def _step_metadata(result, asset: str, key: str) -> int:
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        if materialization.asset_key.to_user_string() == asset and key in materialization.metadata:
            return int(materialization.metadata[key].value)
    return 0


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


def materialize_run(
    instance: DagsterInstance, target: RunStatus, log_level: str = "WARNING"
) -> RunOutcome:
    """Run ``statepool_job`` for one partition, in this process, recording it in ``instance``."""
    from .definitions import defs

    job = defs.resolve_job_def("statepool_job")
    started = time.perf_counter()
    layout = StoreLayout(Settings.from_env().store_dir)
    with layout.lock(target.run.name):
        result = job.execute_in_process(
            instance=instance,
            partition_key=target.run.name,
            tags={SOURCE_FINGERPRINT: target.fingerprint.digest},
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
    outcome = RunOutcome(
        target.run.name, target.status, result.success, seconds=time.perf_counter() - started
    )
    if result.success:
        outcome.states = _step_metadata(result, "checkpoint_states", "states")
        outcome.rejects = _step_metadata(result, "run_episodes", "rejects") + _step_metadata(
            result, "skill_snapshots", "rejects"
        )
    else:
        outcome.error = _first_error(result)
    return outcome


def sync(
    instance: DagsterInstance,
    settle_seconds: float = 0.0,
    on_plan: Callable[[SyncPlan], None] | None = None,
    on_outcome: Callable[[RunOutcome], None] | None = None,
    log_level: str = "WARNING",
) -> SyncSummary:
    """Register new runs and materialize new and changed ones; never stops at a failure.

    Settings come from the ``STATEPOOL_*`` environment, as the job's resources read them.
    """
    settings = Settings.from_env()
    plan = plan_sync(
        discover_runs(Path(settings.runs_dir)),
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
    for target in plan.to_materialize:
        outcome = materialize_run(instance, target, log_level)
        summary.outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome)
    return summary
