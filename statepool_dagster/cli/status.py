"""``statepool status``: each run's, session's and the feedback fold's state, from indexes.

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

A session's figures come from its store index (``session_states/<session>/.index.json``,
the segments built and their counts), its segments folder's listing (segments sealed since
the last build, the last seal) and its rejects folder (one line per reject, the build's and
``statepool ingest``'s alike); whether it is materialized from the instance, as for runs.
Feedback's figures are the fold's manifest (``feedback_stats/fold.json``) and a listing of
the feedback folder.
"""

from __future__ import annotations

import datetime as dt
import json
import os
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

from ..core import AnyPath, Settings, as_path, is_local
from ..core.feedback import MANIFEST, STATS_DIR, feedback_folder
from ..core.names import (
    FINGERPRINT,
    IGNORED_METADATA,
    RUN_IGNORED_FILES,
    RUN_STATES,
    SESSION_PROMPTS,
    SESSION_REJECTS,
    SESSION_STATES,
    SESSIONS_JOB,
    SESSIONS_PARTITIONS,
    STATE_COUNT,
    STATE_STATS,
    STATES,
    RunStatus,
)
from ..core.runs import fingerprint_run
from ..core.segments import list_segments
from ..core.sessions import INDEX, discover_sessions, segments_dir, stored_sessions
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


_SESSION_ASSETS = {AssetKey(SESSION_STATES), AssetKey(SESSION_PROMPTS)}
_CHUNK = 1 << 20


def when(timestamp: float | None) -> str | None:
    """A timestamp as status shows it: local time, to the second."""
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp).isoformat(timespec="seconds")


def _load_index(store: AnyPath, session: str) -> dict[str, dict[str, Any]]:
    try:
        return json.loads((store / SESSION_STATES / session / INDEX).read_bytes())["segments"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _line_count(path: AnyPath) -> int:
    """Lines in a reject file (a last line without its line end counted too)."""
    lines, last = 0, b"\n"
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def reject_count(store: AnyPath, session: str) -> int:
    """Lines in the session's reject files, whoever wrote them (a build or an ingest).

    Every ``*.jsonl`` counts, dot names included: an unfinished write's temporary name
    never ends in ``.jsonl``.
    """
    folder = store / SESSION_REJECTS / session
    try:
        if is_local(folder):
            with os.scandir(folder) as entries:
                files = [folder / e.name for e in entries if e.name.endswith(".jsonl")]
        else:
            files = [p for p in folder.iterdir() if p.name.endswith(".jsonl")]
    except (FileNotFoundError, NotADirectoryError):
        return 0
    total = 0
    for path in files:
        try:
            total += _line_count(path)
        except (FileNotFoundError, IsADirectoryError):
            continue  # replaced or removed while listed
    return total


def _failed_sessions(instance: DagsterInstance, last_success: dict[str, float]) -> set[str]:
    """Sessions whose latest run of their assets failed after their last materialization."""
    failed: dict[str, float] = {}
    for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE])):
        run = record.dagster_run
        session = run.tags.get(PARTITION_TAG)
        ours = run.job_name == SESSIONS_JOB or (run.asset_selection or set()) & _SESSION_ASSETS
        if not session or not ours:
            continue
        stamp = record.update_timestamp.timestamp()
        if stamp > last_success.get(session, 0.0):
            failed[session] = max(stamp, failed.get(session, 0.0))
    return set(failed)


def session_statuses(instance: DagsterInstance, settings: Settings) -> list[dict[str, Any]]:
    """One row per session registered, on disk or stored: its figures and where it stands."""
    store = as_path(settings.store_dir)
    registered = set(instance.get_dynamic_partitions(SESSIONS_PARTITIONS))
    on_disk, _ = discover_sessions(settings.sessions_dir)
    names = sorted(registered | set(on_disk) | set(stored_sessions(store)))
    if not names:
        return []
    asset = AssetKey(SESSION_STATES)
    latest = records(instance, asset, latest_ids(instance, asset).values())
    last_success = {s: r.timestamp for s, r in latest.items()}
    failed = _failed_sessions(instance, last_success)
    return [
        _session_row(store, settings, name, name in on_disk, last_success.get(name), name in failed)
        for name in names
    ]


def _session_row(
    store: AnyPath,
    settings: Settings,
    session: str,
    present: bool,
    materialized: float | None,
    failed: bool,
) -> dict[str, Any]:
    index = _load_index(store, session)
    segments = list_segments(segments_dir(settings.sessions_dir, session)) if present else []
    changed = [s for s in segments if index.get(s.name, {}).get("stamp") != s.size]
    gone = set(index) - {s.name for s in segments} if present else set()
    pending = len(changed) + len(gone)
    if failed:
        status = RunStatus.FAILED
    elif materialized is None:
        status = RunStatus.NEVER
    elif pending:
        status = RunStatus.STALE
    else:
        status = RunStatus.MATERIALIZED
    steps = [step for entry in index.values() for step in entry.get("steps") or []]
    return {
        "session": session,
        "status": status.value,
        "states": sum(e.get("unique", 0) for e in index.values()),
        "copies": sum(e.get("states", 0) for e in index.values()),
        "prompts": sum(e.get("prompts", 0) for e in index.values()),
        "segments": len(index),
        "segments_pending": pending,
        "writers": sorted({e["writer"] for e in index.values() if "writer" in e}),
        "rejects": reject_count(store, session),
        "policy_steps": [min(steps), max(steps)] if steps else None,
        "folder_on_disk": present,
        "last_seal": when(max((s.mtime for s in segments), default=None)),
        "last_materialized": when(materialized),
    }


def _stats_rows(manifest: dict[str, Any], store: AnyPath) -> int | None:
    if "states" in manifest:
        return int(manifest["states"])
    # A fold saved before the manifest counted its states: the table's footer says.
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(str(store / STATS_DIR / "state_stats.parquet")).metadata.num_rows
    except OSError:
        return None


def feedback_status(instance: DagsterInstance, settings: Settings) -> dict[str, Any]:
    """The feedback fold: states with statistics, records folded, segments waiting, last fold."""
    store = as_path(settings.store_dir)
    folder = feedback_folder(settings)
    try:
        manifest = json.loads((store / STATS_DIR / MANIFEST).read_bytes())
    except (OSError, ValueError):
        manifest = {}
    folded = set(manifest.get("folded", ()))
    waiting = sum(1 for s in list_segments(folder) if s.name not in folded)
    event = instance.get_latest_materialization_event(AssetKey(STATE_STATS))
    materialized = event.timestamp if event is not None else None
    saved = manifest.get("saved")
    if materialized is None:
        status = RunStatus.NEVER
    elif waiting or (saved is not None and saved > materialized):
        status = RunStatus.STALE
    else:
        status = RunStatus.MATERIALIZED
    return {
        "feedback": str(folder),
        "states": _stats_rows(manifest, store) if manifest else 0,
        "records": manifest.get("records", 0),
        "bad_lines": manifest.get("bad", 0),
        "segments_folded": len(folded),
        "segments_waiting": waiting,
        "open_groups": manifest.get("open_groups", 0),
        "last_fold": when(saved),
        "state_stats": status.value,
        "last_materialized": when(materialized),
    }
