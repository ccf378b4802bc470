"""Record feedback from reward functions: one segment writer per process, sealed in the background.

A reward call only queues its answers in memory (a tuple each). They are encoded and
written to the open segment when 256 are queued, and by a background thread at least
every ``seal_seconds / 4``; the segment is sealed (``fsync`` and a rename) when full,
once ``seal_seconds`` old (the writer's timer, so an idle worker seals too), and at
exit. A process killed with SIGKILL loses only what was not sealed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import socket
import threading
import uuid
import weakref
from collections.abc import Iterable
from typing import Any

from ..config import Settings, settings_now
from ..segments import SegmentWriter
from .records import (
    FeedbackRecord,
    check_state_id,
    check_values,
    checked,
    encode,
    from_breakdown,
    group_id,
)

FEEDBACK_ENV = Settings.env_name("feedback_dir")
SEAL_ENV = Settings.env_name("feedback_seal_seconds")
DEFAULT_SEAL_SECONDS = Settings.model_fields["feedback_seal_seconds"].default
MAX_SEGMENT_BYTES = 16 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def writer_name() -> str:
    """This process's writer name: host, pid and a random token (never shared)."""
    host = _UNSAFE.sub("_", socket.gethostname())[:40] or "host"
    return f"{host}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


Pending = tuple[Any, ...]  # arguments of records.from_breakdown, group parts first
BATCH = 256


class FeedbackRecorder:
    """Queues answers and writes them to segments in ``folder``; thread-safe; sealed at exit."""

    def __init__(self, folder: str, seal_seconds: float = DEFAULT_SEAL_SECONDS) -> None:
        self.folder = folder
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: list[Pending] = []
        # The writer's own timer seals a segment once it is seal_seconds old.
        self._writer = SegmentWriter(
            folder, writer_name(), max_bytes=MAX_SEGMENT_BYTES, max_age=seal_seconds
        )
        self._stop = threading.Event()
        every = min(max(seal_seconds / 4, 0.02), 5.0)
        thread = threading.Thread(
            target=_drain_loop, args=(weakref.ref(self), self._stop, every), daemon=True
        )
        thread.start()

    def queue(self, items: Iterable[Pending]) -> None:
        """Queue ``(group parts, state_id, breakdown, time, source, step)`` tuples.

        An answer whose numbers its columns cannot hold is left out, the rest queued, and
        a ``ValueError`` names the field.
        """
        good, problems = [], []
        for item in items:
            try:
                check_state_id(item[1])
                check_values(item[2].get("score"), item[3], item[5])
            except ValueError as exc:
                problems.append(str(exc))
            else:
                good.append(item)
        with self._lock:
            self._pending.extend(good)
            full = len(self._pending) >= BATCH
        if full:
            self.drain()
        if problems:
            raise ValueError(f"{len(problems)} answers not recorded: {problems[0]}")

    def record(self, records: Iterable[FeedbackRecord]) -> None:
        """Write finished records now; a ``ValueError`` naming the field of the first record
        its columns cannot hold, before any is written."""
        records = [checked(record) for record in records]
        self.drain()
        with self._lock:
            for record in records:
                self._writer.append(encode(record))

    def drain(self) -> None:
        """Encode and write every queued answer to the open segment."""
        with self._lock:
            batch, self._pending = self._pending, []
            for parts, state_id, breakdown, when, source, step in batch:
                group = group_id(*parts)
                record = from_breakdown(
                    state_id, breakdown, group=group, time=when, source=source, step=step
                )
                self._writer.append(encode(record))

    def flush(self) -> list[str]:
        """Write and seal what is queued and open now; the names this recorder sealed so far."""
        self.drain()
        with self._lock:
            self._writer.seal()
            return list(self._writer.sealed)

    def close(self) -> None:
        self._stop.set()
        self.drain()
        with self._lock:
            self._writer.close()


def _drain_loop(ref: weakref.ref, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        recorder = ref()
        if recorder is None:
            return
        with contextlib.suppress(OSError, ValueError):
            recorder.drain()
        del recorder


_recorders: dict[tuple[int, str], FeedbackRecorder] = {}
_recorders_lock = threading.Lock()


def recorder_for(folder: str) -> FeedbackRecorder:
    """This process's recorder for ``folder`` (a forked child gets its own)."""
    key = (os.getpid(), folder)
    recorder = _recorders.get(key)
    if recorder is not None:
        return recorder
    with _recorders_lock:
        recorder = _recorders.get(key)
        if recorder is None:
            seal = settings_now("feedback_seal_seconds").feedback_seal_seconds
            recorder = _recorders[key] = FeedbackRecorder(folder, seal)
    return recorder


def active_folder() -> str | None:
    """The feedback folder ``STATEPOOL_FEEDBACK_DIR`` names; ``None``: recording is off."""
    return settings_now("feedback_dir").feedback_dir or None


def flush_all() -> None:
    """Seal every open segment of this process (run at exit)."""
    pid = os.getpid()
    with _recorders_lock:
        mine = [key for key in _recorders if key[0] == pid]
        closing = [_recorders.pop(key) for key in mine]  # a later record starts a new writer
    for recorder in closing:
        with contextlib.suppress(OSError, ValueError):
            recorder.close()


atexit.register(flush_all)
