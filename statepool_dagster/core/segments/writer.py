"""A named writer of append-only JSON-line segments, on a local folder or an fsspec URL.

Each record is one line. A segment is written under a dot name (every reader skips
it) and sealed, whole, under ``<writer>-<seq>.jsonl``: locally by ``fsync`` and an
exclusive rename (never over an existing file), through fsspec by a single put of the
whole segment (exclusive too where the store has conditional puts, as S3 does). A
segment is sealed when it holds ``max_bytes`` or ``max_records``, once it is ``max_age``
seconds old (by a timer thread, even if no append follows), and on
:meth:`SegmentWriter.close`.
A writer killed before sealing loses only its unsealed segment; the next writer of
the same name starts after the highest sealed number and never overwrites one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, TypeVar

from ..locations import AnyPath, as_path, entry_name, fresh_listing, is_local
from ..store.atomic import move_new, put_new
from .naming import check_writer_name, parse_segment_name, segment_name, unsealed_name

DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_MAX_RECORDS = 100_000
DEFAULT_MAX_AGE = 30.0
_BUFFER = 1 << 16  # a large state goes straight to the page cache; small ones are batched


def highest_seq(folder: AnyPath, writer: str) -> int:
    """The highest sealed segment number of ``writer`` in ``folder``; ``-1`` when none."""
    best = -1
    if is_local(folder):
        try:
            with os.scandir(folder) as entries:
                names = [e.name for e in entries]
        except FileNotFoundError:
            return best
    else:
        try:
            names = [entry_name(i) for i in fresh_listing(folder)]
        except FileNotFoundError:
            return best
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[0] == writer:
            best = max(best, parsed[1])
    return best


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


W = TypeVar("W", bound="Closing")


class Closing:
    """An object a ``with`` block closes: ``with writer:`` calls ``writer.close()`` on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: W) -> W:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SegmentWriter(Closing):
    """Append JSON lines to ``folder`` as segments named ``<name>-<seq>.jsonl``.

    ``append`` is a buffered local write (an in-memory one through fsspec); the cost
    of durability (``fsync`` and a rename, or one put) is paid when a segment is sealed.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str] | AnyPath,
        name: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_age: float = DEFAULT_MAX_AGE,
        fsync: bool = True,
    ) -> None:
        self.folder = as_path(folder)
        self.name = check_writer_name(name)
        self.max_bytes, self.max_records, self.max_age = max_bytes, max_records, max_age
        self.fsync = fsync
        self.sealed: list[str] = []  # names sealed by this writer, in order
        self._seq = -1
        self._file: BinaryIO | None = None
        self._tmp: AnyPath | None = None
        self._bytes = self._records = 0
        self._opened = 0.0
        self._closed = False
        self._lock = threading.RLock()  # the timer thread seals too
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._error: BaseException | None = None  # a timer seal's failure, raised on next call
        if is_local(self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
        else:
            with contextlib.suppress(FileExistsError):
                self.folder.mkdir(parents=True, exist_ok=True)

    def append(self, record: Any) -> None:
        """Append one record: ``bytes``/``str`` holding one JSON text, or a JSON-able value."""
        if isinstance(record, str):
            line = record.encode("utf-8")
        elif isinstance(record, bytes | bytearray | memoryview):
            line = bytes(record)
        else:
            line = json.dumps(record, ensure_ascii=False).encode("utf-8")
        if b"\n" in line or b"\r" in line:
            raise ValueError("a record must be one line: its JSON text holds a line end")
        with self._lock:
            self._raise_timer_error()
            if self._closed:
                raise ValueError(f"segment writer {self.name!r} is closed")
            if self._file is None:
                self._open()
            assert self._file is not None
            self._file.write(line)
            self._file.write(b"\n")
            self._bytes += len(line) + 1
            self._records += 1
            if (
                self._bytes >= self.max_bytes
                or self._records >= self.max_records
                or time.monotonic() - self._opened >= self.max_age
            ):
                self.seal()

    def seal(self) -> str | None:
        """Seal the open segment now; its sealed name, or ``None`` when nothing was open."""
        with self._lock:
            if self._file is None:
                return None
            f, tmp = self._file, self._tmp
            self._file = self._tmp = None
            self._bytes = self._records = 0
            name = self._seal_local(f, tmp) if is_local(self.folder) else self._seal_fsspec(f)
            self.sealed.append(name)
            return name

    def close(self) -> None:
        """Seal what is open; later appends are refused."""
        self._stop.set()
        with self._lock:
            if not self._closed:
                self._closed = True
                self.seal()
            self._raise_timer_error()

    def _raise_timer_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _start_timer(self) -> None:
        """A daemon thread sealing the open segment once it is ``max_age`` old."""
        if self._timer is not None or not 0 < self.max_age < float("inf"):
            return
        self._timer = threading.Thread(
            target=self._watch, name=f"segments-{self.name}", daemon=True
        )
        self._timer.start()

    def _watch(self) -> None:
        pause = min(max(self.max_age / 4, 0.05), 5.0)
        while not self._stop.wait(pause):
            with self._lock:
                if self._file is None or time.monotonic() - self._opened < self.max_age:
                    continue
                try:
                    self.seal()
                except BaseException as exc:  # the worker hears of it at its next call
                    self._error = exc
                    return

    def abandon(self) -> None:
        """Drop the open segment unsealed (its records are lost), as a crash would."""
        self._stop.set()
        if self._file is not None:
            self._file.close()
            if self._tmp is not None and is_local(self.folder):
                self._tmp.unlink(missing_ok=True)
            self._file = self._tmp = None
        self._closed = True

    def _open(self) -> None:
        self._start_timer()
        if self._seq < 0:
            self._seq = highest_seq(self.folder, self.name) + 1
        self._opened = time.monotonic()
        if is_local(self.folder):
            token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self._tmp = self.folder / unsealed_name(self.name, self._seq, token)
            self._file = open(self._tmp, "xb", buffering=_BUFFER)  # noqa: SIM115
        else:
            self._file = io.BytesIO()

    def _seal_local(self, f: BinaryIO, tmp: AnyPath | None) -> str:
        assert isinstance(tmp, Path)
        f.flush()
        if self.fsync:
            os.fsync(f.fileno())
        f.close()
        while True:
            name = segment_name(self.name, self._seq)
            if move_new(tmp, self.folder / name):
                break
            # Another writer sealed this number (the same name used twice): go past it.
            self._seq = max(self._seq + 1, highest_seq(self.folder, self.name) + 1)
        self._seq += 1
        if self.fsync:
            _fsync_dir(self.folder)
        return name

    def _seal_fsspec(self, f: BinaryIO) -> str:
        assert isinstance(f, io.BytesIO)
        data = f.getvalue()
        while True:
            name = segment_name(self.name, self._seq)
            # One put (an object store publishes it whole), refused over an existing name.
            if put_new(self.folder / name, data):
                break
            self._seq = max(self._seq + 1, highest_seq(self.folder, self.name) + 1)
        self._seq += 1
        return name
