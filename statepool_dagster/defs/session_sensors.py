"""Watch the sessions folder: register new sessions, request builds of new sealed segments only.

The cursor keeps, per session and writer, the highest segment number and the count seen:
its size follows the writers, never the segments. A tick lists each session's segments
folder once and requests a run for a session only when one of its writers sealed a
segment past the cursor (or a segment arrived late, below it).
"""

import hashlib
import json
from typing import Any

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ..core.names import SESSIONS_PARTITIONS
from ..core.segments.reader import Segment, list_segments
from ..core.sessions.layout import discover_sessions, segments_dir
from .resources import statepool_settings
from .sensors import sensor_interval
from .sessions import sessions_job, sessions_partitions

SessionCursor = dict[str, dict[str, list[int]]]  # session -> writer -> [highest seq, count]


def load_cursor(text: str | None) -> SessionCursor:
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


@sensor(
    job=sessions_job,
    # At most 15 s, whatever the runs sensor's interval: a tick only lists segment folders,
    # and a sealed segment should reach training_dataset within 90 s.
    minimum_interval_seconds=min(sensor_interval(), 15),
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Watches STATEPOOL_SESSIONS_DIR. A new session folder becomes a `sessions` partition; "
        "a session whose writers sealed new segments is built (only those segments are read)."
    ),
)
def sessions_sensor(context: SensorEvaluationContext) -> SensorResult:
    settings = statepool_settings.settings()
    sessions, invalid = discover_sessions(settings.sessions_dir)
    for name, reason in invalid.items():
        context.log.warning(f"session folder {name!r} skipped: {reason}")
    known = set(context.instance.get_dynamic_partitions(SESSIONS_PARTITIONS))
    cursor = load_cursor(context.cursor)
    next_cursor: SessionCursor = {}
    requests: list[RunRequest] = []
    for session in sessions:
        segments = list_segments(segments_dir(settings.sessions_dir, session))
        fresh, state = new_segments(segments, cursor.get(session, {}))
        next_cursor[session] = state
        if fresh:
            key = hashlib.blake2b("\n".join(fresh).encode(), digest_size=8).hexdigest()
            requests.append(
                RunRequest(
                    partition_key=session,
                    run_key=f"{session}:{key}",
                    tags={"statepool/new_segments": str(len(fresh))},
                )
            )
    new_keys = [s for s in sessions if s not in known]
    adds = [sessions_partitions.build_add_request(new_keys)] if new_keys else []
    summary = f"{len(sessions)} sessions, {len(new_keys)} new, {len(requests)} with new segments"
    context.log.info(summary)
    result: dict[str, Any] = {
        "run_requests": requests,
        "dynamic_partitions_requests": adds,
        "cursor": json.dumps(next_cursor, sort_keys=True, separators=(",", ":")),
    }
    if not requests:
        result["skip_reason"] = summary
    return SensorResult(**result)
