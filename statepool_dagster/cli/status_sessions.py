"""``statepool status`` for sessions and feedback, from indexes: nothing of the pool is read.

A session's figures come from its store index (``session_states/<session>/.index.json``,
the segments built and their counts), its segments folder's listing (segments sealed since
the last build, the last seal) and its rejects folder (one line per reject, the build's and
``statepool ingest``'s alike). Whether it is materialized comes from the instance, as for
runs: one query for the latest materialization of every session, one for their records.
Feedback's figures are the fold's manifest (``feedback_stats/fold.json``) and a listing of
the feedback folder.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from ..core import AnyPath, Settings, as_path, is_local
from ..core.feedback import MANIFEST, STATS_DIR, feedback_folder
from ..core.names import (
    SESSION_PROMPTS,
    SESSION_REJECTS,
    SESSION_STATES,
    SESSIONS_JOB,
    SESSIONS_PARTITIONS,
    STATE_STATS,
    RunStatus,
)
from ..core.segments import list_segments
from ..core.sessions import INDEX, discover_sessions, segments_dir, stored_sessions
from .status import PARTITION_TAG, latest_ids, records

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
