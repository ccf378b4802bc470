"""Concurrent syncs share the work: what another sync or a launched run is building.

Two guards, so that a partition is built once however ``statepool sync`` and the
sensor's runs interleave:

- **The store's run locks, then a second look.** A sync takes the store lock of every run
  of a batch (waiting while another process holds one: it is building that run), then
  asks the instance again what each run's last materialization was built from. A run
  whose recorded source fingerprint is already the one this sync planned for was built
  by someone else meanwhile: it is skipped, not built twice.
- **Runs already under way go last.** Partitions of a Dagster run another process has
  started (another sync's batch, a run the sensor launched) are left to the end of the
  sync, which then waits for those runs to finish before taking the second look. A
  queued run is not waited for: without a daemon it would never start.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from ..core.names import JOB
from ..defs.runs.fingerprints import recorded_fingerprints
from ..defs.tags import PARTITION, PARTITION_RANGE_END, PARTITION_RANGE_START, SYNC_PID
from .interrupts import raise_if_signalled


@dataclass(frozen=True)
class Target:
    """A run the runs sensor asked for: its partition, its files' fingerprint, new | changed."""

    run: str
    fingerprint: str
    status: str


BUSY_POLL_SECONDS = 0.5
BUSY_WAIT_SECONDS = 600.0  # then build anyway: the store locks still keep writers apart
_UNDER_WAY = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def built_elsewhere(instance: DagsterInstance, targets: Iterable[Target]) -> set[str]:
    """The runs whose last materialization was built from the files ``targets`` planned for."""
    recorded = recorded_fingerprints(instance)
    return {t.run for t in targets if recorded.get(t.run) == t.fingerprint}


def partitions_under_way(instance: DagsterInstance, order: list[str]) -> dict[str, str]:
    """``{partition: Dagster run id}`` for the runs of this job another process is executing.

    A run names its partition (``dagster/partition``) or its range of partitions, read in
    the instance's key order.
    """
    position = {key: i for i, key in enumerate(order)}
    mine = str(os.getpid())
    found: dict[str, str] = {}
    for run in instance.get_runs(RunsFilter(job_name=JOB, statuses=_UNDER_WAY)):
        if run.tags.get(SYNC_PID) == mine:
            continue
        key = run.tags.get(PARTITION)
        first = run.tags.get(PARTITION_RANGE_START)
        last = run.tags.get(PARTITION_RANGE_END)
        if key is not None:
            found[key] = run.run_id
        elif first in position and last in position:
            for key in order[position[first] : position[last] + 1]:
                found[key] = run.run_id
    return found


def wait_for_runs(
    instance: DagsterInstance, run_ids: Iterable[str], timeout: float = BUSY_WAIT_SECONDS
) -> None:
    """Return once none of ``run_ids`` is under way any more (or after ``timeout``)."""
    waiting = set(run_ids)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        raise_if_signalled()
        runs = instance.get_runs(RunsFilter(run_ids=list(waiting), statuses=_UNDER_WAY))
        waiting = {run.run_id for run in runs}
        if waiting:
            time.sleep(BUSY_POLL_SECONDS)
