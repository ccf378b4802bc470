"""``statepool status``: each run's partition state, from the instance and the runs folder."""

from __future__ import annotations

import datetime as dt
from typing import Any

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

from ..core.config import Settings
from ..core.locations import as_path
from ..core.names import IGNORED_METADATA, STATE_COUNT, STATES
from ..core.runs.files import fingerprint_run
from ..defs.fingerprints import FINAL_ASSET, recorded_fingerprints
from ..defs.partitions import RUNS

STATES_ASSET = AssetKey(STATES)


def ignored_files(instance: DagsterInstance, run: str) -> int:
    """Files the run's latest materializations passed over, each listed with its reason."""
    total = 0
    for asset, key in IGNORED_METADATA:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[run]), limit=1
        ).records
        if records:
            meta = records[0].asset_materialization.metadata
            total += len(meta[key].value or {}) if key in meta else 0
    return total


def run_statuses(instance: DagsterInstance, settings: Settings) -> list[dict[str, Any]]:
    """One row per registered run: materialized, stale, never or failed; states; last time."""
    recorded = recorded_fingerprints(instance)
    rows = []
    for run in instance.get_dynamic_partitions(RUNS):
        latest = instance.get_runs(RunsFilter(tags={"dagster/partition": run}), limit=1)
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=FINAL_ASSET, asset_partitions=[run]), limit=1
        ).records
        states_records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=STATES_ASSET, asset_partitions=[run]), limit=1
        ).records
        path = as_path(settings.runs_dir) / run
        last_success = records[0].timestamp if records else 0.0
        failed_since = (
            latest
            and latest[0].status == DagsterRunStatus.FAILURE
            and (instance.get_run_record_by_id(latest[0].run_id).update_timestamp.timestamp())
            > last_success
        )
        if failed_since:
            status = "failed"
        elif run not in recorded:
            status = "never"
        elif not path.is_dir() or fingerprint_run(path).digest != recorded[run]:
            status = "stale"
        else:
            status = "materialized"
        states = 0
        if states_records:
            meta = states_records[0].asset_materialization.metadata
            states = int(meta[STATE_COUNT].value) if STATE_COUNT in meta else 0
        when = None
        if records:
            when = dt.datetime.fromtimestamp(records[0].timestamp).isoformat(timespec="seconds")
        rows.append(
            {
                "run": run,
                "status": status,
                "states": states,
                "ignored_files": ignored_files(instance, run),
                "last_materialized": when,
            }
        )
    return rows
