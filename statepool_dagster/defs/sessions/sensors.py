"""Watch the sessions folder: register new sessions, request builds of new sealed segments only.

The cursor keeps, per session and writer, the highest segment number and the count seen:
its size follows the writers, never the segments. A tick lists each session's segments
folder once and requests a run for a session only when one of its writers sealed a
segment past the cursor (or a segment arrived late, below it). Without a cursor (a first
tick, ``statepool sync``) the store says what is built: a session is requested when its
sealed segments are not all built (or some built one is gone).
"""

from __future__ import annotations

import hashlib
import json

from dagster import DagsterInstance, Definitions, RunRequest, SensorDefinition, definitions

from ...core.config import Settings
from ...core.names import SESSIONS_JOB, SESSIONS_PARTITIONS
from ...core.segments.reader import Segment, list_segments
from ...core.sessions.layout import discover_sessions, segments_dir
from ..tags import NEW_SEGMENTS
from ..ticks import FAST_INTERVAL, Tick, result, sensor_interval, watching

SessionCursor = dict[str, dict[str, list[int]]]  # session -> writer -> [highest seq, count]


def load_session_cursor(text: str | None) -> SessionCursor:
    try:
        cursor = json.loads(text or "{}")
    except ValueError:
        return {}
    return cursor if isinstance(cursor, dict) else {}


def new_segments(segments: list[Segment], seen: dict[str, list[int]]) -> tuple[list[str], dict]:
    """Segments past ``seen`` (plus a marker per writer whose older segments grew in number:
    one arrived late), and the cursor's new entry for the session."""
    by_writer: dict[str, list[Segment]] = {}
    for segment in segments:
        by_writer.setdefault(segment.writer, []).append(segment)
    fresh: list[str] = []
    state: dict[str, list[int]] = {}
    for writer, mine in by_writer.items():
        high, count = seen.get(writer, [-1, 0])
        above = [s.name for s in mine if s.seq > high]
        fresh += above
        if len(mine) - len(above) > count:
            fresh.append(f"{writer}:late:{len(mine)}")
        state[writer] = [max(s.seq for s in mine), len(mine)]
    return fresh, state


def sessions_tick(instance: DagsterInstance, settings: Settings, cursor: str | None) -> Tick:
    """New session folders become partitions; a session with new sealed segments is requested."""
    sessions, invalid = discover_sessions(settings.sessions_dir)
    known = set(instance.get_dynamic_partitions(SESSIONS_PARTITIONS))
    seen = None if cursor is None else load_session_cursor(cursor)
    next_cursor: SessionCursor = {}
    requests: list[RunRequest] = []
    for session in sessions:
        segments = list_segments(segments_dir(settings.sessions_dir, session))
        fresh, state = new_segments(segments, {} if seen is None else seen.get(session, {}))
        if seen is None:  # no memory of earlier ticks: what the store has not built
            from ...core.sessions.build import pending_segments

            fresh = pending_segments(settings.sessions_dir, settings.store_dir, session)
        next_cursor[session] = state
        if fresh:
            key = hashlib.blake2b("\n".join(fresh).encode(), digest_size=8).hexdigest()
            requests.append(
                RunRequest(
                    partition_key=session,
                    run_key=f"{session}:{key}",
                    tags={NEW_SEGMENTS: str(len(fresh))},
                )
            )
    new_keys = [s for s in sessions if s not in known]
    summary = f"{len(sessions)} sessions, {len(new_keys)} new, {len(requests)} with new segments"
    text = json.dumps(next_cursor, sort_keys=True, separators=(",", ":"))
    found = result(requests, {SESSIONS_PARTITIONS: new_keys}, summary, cursor=text)
    warnings = [f"session folder {name!r} skipped: {why}" for name, why in invalid.items()]
    return Tick(found, summary, warnings)


def sessions_sensor_def(interval: int = FAST_INTERVAL) -> SensorDefinition:
    return watching(
        sessions_tick,
        "sessions_sensor",
        SESSIONS_JOB,
        interval,
        "Watches STATEPOOL_SESSIONS_DIR. A new session folder becomes a `sessions` partition; "
        "a session whose writers sealed new segments is built (only those segments are read).",
    )


@definitions
def sessions_sensor_at_interval() -> Definitions:
    """The sessions sensor, ticking at least as often as the runs sensor."""
    return Definitions(sensors=[sessions_sensor_def(min(sensor_interval(), FAST_INTERVAL))])
