"""What ``statepool sync`` built: each Dagster run's outcome, read from its result's events."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.names import IGNORED_METADATA, REJECT_COUNTS, STATE_COUNT, STATE_STATS, STATES, Change
from ..core.runs import SyncPlan


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
class SessionOutcome:
    """One session's build in a sync."""

    session: str
    pending: int  # the sealed segments the sensor saw past what was built
    ok: bool
    error: str = ""


@dataclass
class FeedbackOutcome:
    """The fold of new feedback into ``state_stats`` in a sync (``ran`` False: nothing new)."""

    ran: bool = False
    ok: bool = True
    records: int = 0
    segments: int = 0
    states: int = 0
    bad_lines: int = 0
    error: str = ""


# FeedbackOutcome's counts: state_stats' metadata key of each.
FOLD_COUNTS = {
    "records": "new_records",
    "segments": "new_segments",
    "states": "states",
    "bad_lines": "new_bad_lines",
}


@dataclass
class SyncSummary:
    """Everything ``statepool sync`` reports."""

    plan: SyncPlan
    outcomes: list[RunOutcome] = field(default_factory=list)
    sessions: list[SessionOutcome] = field(default_factory=list)
    feedback: FeedbackOutcome = field(default_factory=FeedbackOutcome)

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if not o.success]

    @property
    def failed_sessions(self) -> list[SessionOutcome]:
        return [o for o in self.sessions if not o.ok]

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


def materialized(result) -> dict[tuple[str, str | None], dict]:
    """``{(asset, partition): metadata}`` of every materialization ``result`` recorded."""
    found = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        key = (materialization.asset_key.to_user_string(), materialization.partition)
        found[key] = materialization.metadata
    return found


def run_outcome(found: dict, run: str, status: str, seconds: float) -> RunOutcome:
    """A built run's outcome from its materializations' metadata (``found``)."""

    def value(asset: str, key: str):
        metadata = found.get((asset, run), {})
        return metadata[key].value if key in metadata else None

    return RunOutcome(
        run,
        status,
        True,
        states=int(value(STATES, STATE_COUNT) or 0),
        rejects=sum(int(value(asset, key) or 0) for asset, key in REJECT_COUNTS),
        ignored=sum(len(value(asset, key) or {}) for asset, key in IGNORED_METADATA),
        seconds=seconds,
    )


def feedback_outcome(result) -> FeedbackOutcome:
    """A fold's outcome from its run's materialization of ``state_stats``."""
    metadata = materialized(result).get((STATE_STATS, None), {})
    counts = {f: int(metadata[k].value) for f, k in FOLD_COUNTS.items() if k in metadata}
    return FeedbackOutcome(ran=True, ok=result.success, error=first_error(result), **counts)


def first_error(result) -> str:
    """The root cause of the first failed step, without Dagster's wrapping ("" if none failed)."""
    if result.success:
        return ""
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            message = error.message.strip().split(f"{error.cls_name}: ", 1)[-1]
            return message.splitlines()[0] if message else error.cls_name
    return "run failed"
