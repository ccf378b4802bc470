"""Which runs to register and (re)materialize: shared by the sensor and ``statepool sync``."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..names import Change
from .files import Discovery, Fingerprint, RunDir, fingerprint_run


@dataclass(frozen=True)
class RunChange:
    """One discovered run and what to do about it."""

    run: RunDir
    fingerprint: Fingerprint
    status: Change


@dataclass
class SyncPlan:
    """Partitions to add, runs to request, and everything else counted."""

    new_keys: list[str] = field(default_factory=list)
    runs: list[RunChange] = field(default_factory=list)
    invalid: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def with_status(self, *statuses: Change) -> list[RunChange]:
        return [r for r in self.runs if r.status in statuses]

    @property
    def to_materialize(self) -> list[RunChange]:
        return self.with_status(Change.NEW, Change.CHANGED)

    def describe(self) -> str:
        """One line, e.g. ``2 new runs, 1 changed, 37 unchanged, 1 invalid name: `x y```."""
        counts = {s.value: len(self.with_status(s)) for s in Change}
        parts = [
            f"{counts['new']} new run{'s' if counts['new'] != 1 else ''}",
            f"{counts['changed']} changed",
            f"{counts['unchanged']} unchanged",
        ]
        if counts["settling"]:
            parts.append(f"{counts['settling']} still being written")
        if self.invalid:
            # escaped as the CLI's "skipped run folder" lines show them (a newline or an
            # escape sequence in a folder name never reaches the terminal as such)
            names = ", ".join(f"`{repr(n)[1:-1]}`" for n in sorted(self.invalid))
            plural = "s" if len(self.invalid) != 1 else ""
            parts.append(f"{len(self.invalid)} invalid name{plural}: {names}")
        return ", ".join(parts)


def plan_sync(
    discovery: Discovery,
    known_keys: Collection[str],
    recorded: Mapping[str, str],
    now: float,
    settle_seconds: float = 0.0,
) -> SyncPlan:
    """Compare each run's files with the fingerprint its last materialization recorded.

    A run whose newest file is younger than ``settle_seconds`` is still being
    written: it is registered but not requested until it settles.
    """
    plan = SyncPlan(invalid=dict(discovery.invalid), problems=list(discovery.problems))
    known = set(known_keys)
    for run in discovery.runs:
        fp = fingerprint_run(run.path)
        if run.name not in known:
            plan.new_keys.append(run.name)
        if recorded.get(run.name) == fp.digest:
            status = Change.UNCHANGED
        elif settle_seconds and now - fp.newest_mtime < settle_seconds:
            status = Change.SETTLING
        else:
            status = Change.NEW if run.name not in recorded else Change.CHANGED
        plan.runs.append(RunChange(run, fp, status))
    return plan
