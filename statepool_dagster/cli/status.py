"""``statepool status``: each run's partition state, from the instance's index and the runs folder.

The answer comes from what Dagster already indexes, in a handful of batched queries
whatever the number of runs: the latest materialization of every partition of an asset
is one indexed query (``get_latest_storage_id_by_partition``), and their records (the
metadata: states, ignored files, fingerprint) one more per asset and 500 partitions.
Failed runs are one query on the run status index; only a partition with a failure newer
than its last success has its latest run looked up. Nothing of the store's tables is
read, and no file the stages would have to keep in step: the instance already is that
index, updated with each materialization.
"""

from __future__ import annotations

import datetime as dt
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

from ..core.config import Settings
from ..core.locations import as_path
from ..core.names import FINGERPRINT, IGNORED_METADATA, STATE_COUNT, STATES, RunStatus
from ..core.runs.files import fingerprint_run
from ..defs.fingerprints import FINAL_ASSET
from ..defs.partitions import RUNS

STATES_ASSET = AssetKey(STATES)
PARTITION_TAG = "dagster/partition"
_BATCH = 500


def latest_records(instance: DagsterInstance, asset: AssetKey) -> dict[str, EventLogRecord]:
    """``{partition: its latest materialization record}`` of ``asset``, in batched queries."""
    latest = instance.get_latest_storage_id_by_partition(
        asset, DagsterEventType.ASSET_MATERIALIZATION
    )
    ids = sorted(latest.values())
    records: dict[str, EventLogRecord] = {}
    for i in range(0, len(ids), _BATCH):
        chunk = ids[i : i + _BATCH]
        for record in instance.fetch_materializations(
            AssetRecordsFilter(asset_key=asset, storage_ids=chunk), limit=len(chunk)
        ).records:
            records[record.partition_key] = record
    return records


def _metadata_value(record: EventLogRecord | None, key: str) -> Any:
    if record is None:
        return None
    value = record.asset_materialization.metadata.get(key)
    return value.value if value is not None else None


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
    states = latest_records(instance, STATES_ASSET)
    ignored = {asset: latest_records(instance, AssetKey(asset)) for asset, _ in IGNORED_METADATA}
    ignored[STATES] = states
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
        count = _metadata_value(states.get(run), STATE_COUNT)
        ignored_files = sum(
            len(_metadata_value(ignored[asset].get(run), key) or {})
            for asset, key in IGNORED_METADATA
        )
        when = None
        if record is not None:
            when = dt.datetime.fromtimestamp(record.timestamp).isoformat(timespec="seconds")
        rows.append(
            {
                "run": run,
                "status": status.value,
                "states": int(count) if count is not None else 0,
                "ignored_files": ignored_files,
                "last_materialized": when,
            }
        )
    return rows
