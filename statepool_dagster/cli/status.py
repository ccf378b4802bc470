"""``statepool status``: each run's partition state, from the instance's index and the runs folder.

The answer comes from what Dagster already indexes, in a handful of batched queries
whatever the number of runs: the latest materialization of every partition of an asset
is one indexed query (``get_latest_storage_id_by_partition``), and their records one more
per 500 partitions. The final asset's records hold all status shows (the fingerprint, the
run's states and ignored files); only a run whose final materialization lacks the totals
(made before they were recorded there, or by a step that did not build what they count)
or is older than the latest of the assets they count has those assets' records read too.
Failed runs are one query on the run status index; only a partition with a failure newer
than its last success has its latest run looked up. Nothing of the store's tables is
read, and no file the stages would have to keep in step: the instance already is that
index, updated with each materialization.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    EventLogRecord,
    RunsFilter,
)

from ..core import Settings, as_path
from ..core.names import (
    FINGERPRINT,
    IGNORED_METADATA,
    RUN_IGNORED_FILES,
    RUN_STATES,
    STATE_COUNT,
    STATES,
    RunStatus,
)
from ..core.runs import fingerprint_run
from ..defs.runs.fingerprints import FINAL_ASSET
from ..defs.runs.partitions import RUNS

PARTITION_TAG = "dagster/partition"
_BATCH = 500
# The assets whose counts the final asset's totals repeat.
_COUNTED = (STATES, *(asset for asset, _ in IGNORED_METADATA if asset != STATES))


def latest_ids(instance: DagsterInstance, asset: AssetKey) -> dict[str, int]:
    """``{partition: storage id of its latest materialization}`` of ``asset``: one query."""
    return instance.get_latest_storage_id_by_partition(
        asset, DagsterEventType.ASSET_MATERIALIZATION
    )


def records(
    instance: DagsterInstance, asset: AssetKey, storage_ids: Iterable[int]
) -> dict[str, EventLogRecord]:
    """``{partition: record}`` of ``asset``'s materializations ``storage_ids``, batched."""
    ids = sorted(storage_ids)
    found: dict[str, EventLogRecord] = {}
    for i in range(0, len(ids), _BATCH):
        chunk = ids[i : i + _BATCH]
        for record in instance.fetch_materializations(
            AssetRecordsFilter(asset_key=asset, storage_ids=chunk), limit=len(chunk)
        ).records:
            found[record.partition_key] = record
    return found


def latest_records(instance: DagsterInstance, asset: AssetKey) -> dict[str, EventLogRecord]:
    """``{partition: its latest materialization record}`` of ``asset``, in batched queries."""
    return records(instance, asset, latest_ids(instance, asset).values())


def _metadata_value(record: EventLogRecord | None, key: str) -> Any:
    if record is None:
        return None
    value = record.asset_materialization.metadata.get(key)
    return value.value if value is not None else None


def run_totals(
    instance: DagsterInstance, final: dict[str, EventLogRecord]
) -> dict[str, tuple[int, int]]:
    """``{run: (states, ignored files)}`` as the latest materializations of what they count say.

    From the final asset's records where they carry the totals and are newer than the
    latest materialization of every asset counted; the other runs' from those assets' own.
    """
    latest = {asset: latest_ids(instance, AssetKey(asset)) for asset in _COUNTED}
    totals: dict[str, tuple[int, int]] = {}
    for run, record in final.items():
        states = _metadata_value(record, RUN_STATES)
        ignored = _metadata_value(record, RUN_IGNORED_FILES)
        current = all(ids.get(run, -1) < record.storage_id for ids in latest.values())
        if states is not None and ignored is not None and current:
            totals[run] = (int(states), int(ignored))
    behind = {run for ids in latest.values() for run in ids} - totals.keys()
    if not behind:
        return totals
    read = {
        asset: records(instance, AssetKey(asset), (ids[r] for r in behind if r in ids))
        for asset, ids in latest.items()
    }
    for run in behind:
        count = _metadata_value(read[STATES].get(run), STATE_COUNT)
        ignored = sum(
            len(_metadata_value(read[asset].get(run), key) or {}) for asset, key in IGNORED_METADATA
        )
        totals[run] = (int(count) if count is not None else 0, ignored)
    return totals


def _failed_since(instance: DagsterInstance, last_success: dict[str, float]) -> set[str]:
    """Partitions whose latest Dagster run failed after their last materialization."""
    candidates = set()
    for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE])):
        run = record.dagster_run.tags.get(PARTITION_TAG)
        if run and record.update_timestamp.timestamp() > last_success.get(run, 0.0):
            candidates.add(run)
    failed = set()
    for run in candidates:  # rare: confirm that the failure is the partition's latest run
        latest = instance.get_run_records(RunsFilter(tags={PARTITION_TAG: run}), limit=1)
        if (
            latest
            and latest[0].dagster_run.status == DagsterRunStatus.FAILURE
            and latest[0].update_timestamp.timestamp() > last_success.get(run, 0.0)
        ):
            failed.add(run)
    return failed


def run_statuses(instance: DagsterInstance, settings: Settings) -> list[dict[str, Any]]:
    """One row per registered run: materialized, stale, never or failed; states; last time."""
    final = latest_records(instance, FINAL_ASSET)
    totals = run_totals(instance, final)
    last_success = {run: record.timestamp for run, record in final.items()}
    failed = _failed_since(instance, last_success)
    rows = []
    for run in instance.get_dynamic_partitions(RUNS):
        record = final.get(run)
        recorded = _metadata_value(record, FINGERPRINT)
        path = as_path(settings.runs_dir) / run
        if run in failed:
            status = RunStatus.FAILED
        elif not recorded:
            status = RunStatus.NEVER
        elif not path.is_dir() or fingerprint_run(path).digest != recorded:
            status = RunStatus.STALE
        else:
            status = RunStatus.MATERIALIZED
        states, ignored_files = totals.get(run, (0, 0))
        when = None
        if record is not None:
            when = dt.datetime.fromtimestamp(record.timestamp).isoformat(timespec="seconds")
        rows.append(
            {
                "run": run,
                "status": status.value,
                "states": states,
                "ignored_files": ignored_files,
                "last_materialized": when,
            }
        )
    return rows
