"""Record feedback from reward functions: one segment writer per process, sealed in the background.

Recording is a buffered append (one encoded line into an open segment file); sealing
(``fsync`` and a rename) happens when a segment is full, when it has been open
``seal_seconds`` (the writer's timer thread, so an idle worker seals too), and at
exit. A process killed with SIGKILL loses only its unsealed segment.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import socket
import threading
import uuid
from collections.abc import Iterable

from ..segments import SegmentWriter
from .records import FeedbackRecord, encode

FEEDBACK_ENV = "STATEPOOL_FEEDBACK_DIR"
SEAL_ENV = "STATEPOOL_FEEDBACK_SEAL_SECONDS"
DEFAULT_SEAL_SECONDS = 30.0
MAX_SEGMENT_BYTES = 16 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def writer_name() -> str:
    """This process's writer name: host, pid and a random token (never shared)."""
    host = _UNSAFE.sub("_", socket.gethostname())[:40] or "host"
    return f"{host}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


class FeedbackRecorder:
    """Appends records to segments in ``folder``; thread-safe; sealed at exit."""

    def __init__(self, folder: str, seal_seconds: float = DEFAULT_SEAL_SECONDS) -> None:
        self.folder = folder
        self.pid = os.getpid()
        self._lock = threading.Lock()
        # The writer's own timer seals a segment once it is seal_seconds old.
        self._writer = SegmentWriter(
            folder, writer_name(), max_bytes=MAX_SEGMENT_BYTES, max_age=seal_seconds
        )

    def record(self, records: Iterable[FeedbackRecord]) -> None:
        lines = [encode(r) for r in records]
        with self._lock:
            for line in lines:
                self._writer.append(line)

    def flush(self) -> list[str]:
        """Seal what is open now; the names this recorder sealed so far."""
        with self._lock:
            self._writer.seal()
            return list(self._writer.sealed)

    def close(self) -> None:
        with self._lock:
            self._writer.close()


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
            raw = os.environ.get(SEAL_ENV)
            seal = float(raw) if raw else DEFAULT_SEAL_SECONDS
            recorder = _recorders[key] = FeedbackRecorder(folder, seal)
    return recorder


def active_folder() -> str | None:
    """The feedback folder ``STATEPOOL_FEEDBACK_DIR`` names; ``None``: recording is off."""
    return os.environ.get(FEEDBACK_ENV) or None


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
