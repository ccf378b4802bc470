"""The one gate every reader of a run's files goes through: never a FIFO, never a link out.

:class:`FolderGate` opens many files of one run, resolving each folder once;
:func:`run_notes` says in plain words what of a run's shape the gate will find;
:func:`read_sidecars` reads, through it, a run's optional per-checkpoint sidecars
(``k`` is the checkpoint of state ``<run>_ckpt<k>``)::

    analyses/analysis_v<k>.json    the Reflector's analysis (a JSON object) the curator read at k
    receipts/receipt_v<k>.txt      the receipt of the curator's previous round, UTF-8 text

A bad sidecar is set aside as a reject (the state keeps the seed's defaults); a file whose
name does not match is listed as ignored.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadRecordError
from ..locations import AnyPath, is_local
from ..names import EPISODES_FILE, SNAPSHOTS_DIR
from ..rejects import RAW_LIMIT, UNSTORABLE, Reject, escape_bytes
from .json_read import loads, storable


class RefusedFile(OSError):
    """A file in a run that is never opened for reading; ``strerror`` says why.

    An ``OSError``, so every reader's "unreadable" path turns it into a reject.
    """


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def open_run_file(path: AnyPath, run_dir: AnyPath) -> int:
    """A read-only descriptor of ``path``, a regular file in ``run_dir``, or :class:`RefusedFile`.

    The one gate every reader of a run's files goes through. Never blocks and never
    follows a link out of the run: the path is resolved first (a loop is refused), a
    target outside the run folder is refused without being opened, and the file is
    opened non-blocking without following a last-moment link, then checked with
    ``fstat`` (a FIFO, socket, device or directory is refused). The run folder itself
    may be a symlink: "inside" is judged against where it resolves.
    """
    try:
        real = os.path.realpath(path, strict=True)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedFile(errno.ELOOP, "a symlink loop (not followed)") from None
        raise
    if not _inside(real, os.path.realpath(run_dir)):
        raise RefusedFile(errno.EXDEV, "a link to a file outside the run folder (not followed)")
    return _open_regular(real)


def _open_regular(real: str) -> int:
    """``real`` (a resolved path) opened non-blocking, without following a last-moment link;
    a FIFO, socket, device or directory refused."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ELOOP):  # a socket; a link swapped in meanwhile
            raise RefusedFile(exc.errno, f"{_kind(os.lstat(real).st_mode)} (not read)") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RefusedFile(errno.EINVAL, f"{_kind(mode)} (not read)")
    return fd


def read_run_file(path: AnyPath, run_dir: AnyPath) -> bytes:
    """All bytes of a run file through :func:`open_run_file` (an fsspec file is read as is)."""
    if not is_local(path):
        return path.read_bytes()
    with os.fdopen(open_run_file(path, run_dir), "rb") as f:
        return f.read()


def run_file_problem(path: AnyPath, run_dir: AnyPath) -> str | None:
    """Why :func:`open_run_file` would refuse ``path`` (``None``: a readable regular file)."""
    if not is_local(path):
        return None
    try:
        os.close(open_run_file(path, run_dir))
    except RefusedFile as exc:
        return exc.strerror
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return None


class FolderGate:
    """:func:`open_run_file` for the files of one run read by one stage: each folder's real
    path is resolved once (a file that is itself a link goes through the whole gate)."""

    def __init__(self, run_dir: AnyPath) -> None:
        self.run_dir = run_dir
        self._real: dict[str, str] = {}
        self._run: str | None = None  # where the run folder resolves (it may be a link)

    def _real_folder(self, folder: str) -> str:
        real = self._real.get(folder)
        if real is None:
            real = self._real[folder] = os.path.realpath(folder, strict=True)
        return real

    def open(self, path: AnyPath) -> int:
        text = os.fspath(path)
        try:
            if stat.S_ISLNK(os.lstat(text).st_mode):
                return open_run_file(path, self.run_dir)
            folder, name = os.path.split(text)
            real = os.path.join(self._real_folder(folder), name)
            if self._run is None:
                self._run = os.path.realpath(self.run_dir)
        except OSError:  # the whole gate says why
            return open_run_file(path, self.run_dir)
        if not _inside(real, self._run):
            raise RefusedFile(errno.EXDEV, "a link to a file outside the run folder (not followed)")
        return _open_regular(real)

    def read(self, path: AnyPath) -> bytes:
        """All bytes of a run file (an fsspec file is read as is)."""
        if not is_local(path):
            return path.read_bytes()
        return read_all(self.open(path))


def read_all(fd: int) -> bytes:
    """Everything left in ``fd``, which is then closed: as many bytes as it holds asked for
    at once (one read for a file that does not grow meanwhile), no buffered file around it."""
    try:
        want = max(os.fstat(fd).st_size, 0) + 1
        chunks = []
        while chunk := os.read(fd, want):
            chunks.append(chunk)
            want = 1 << 20
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def present(path: AnyPath) -> bool:
    """Whether the run has an entry at ``path`` at all (a dangling link or a loop counts)."""
    return os.path.lexists(path) if is_local(path) else path.exists()


def run_notes(run_dir: AnyPath) -> list[str]:
    """Plain-words remarks about a run folder's shape (none for a complete, ordinary run)."""
    notes = []
    if run_dir.is_symlink():
        notes.append(f"run folder is a symlink to {run_dir.resolve()} (followed)")
    episodes = run_dir / EPISODES_FILE
    problem = run_file_problem(episodes, run_dir) if present(episodes) else None
    if not present(episodes):
        notes.append(f"no {EPISODES_FILE}: the run has no episodes yet")
    elif problem:
        notes.append(f"{EPISODES_FILE} is not read: {problem}")
    elif episodes.is_file() and episodes.stat().st_size == 0:
        notes.append(f"{EPISODES_FILE} is empty")
    snapshots = run_dir / SNAPSHOTS_DIR
    if not snapshots.is_dir():
        if present(snapshots):  # a loop, a FIFO, a file: said so, not "no checkpoints yet"
            problem = run_file_problem(snapshots, run_dir) or "not a folder"
            notes.append(f"{SNAPSHOTS_DIR}/ is not read: {problem}")
        else:
            notes.append(f"no {SNAPSHOTS_DIR}/ folder: the run has no checkpoints yet")
    return notes


ANALYSES_DIR = "analyses"
RECEIPTS_DIR = "receipts"
ANALYSIS_NAME = re.compile(r"analysis_v(0|[1-9][0-9]*)\.json")
RECEIPT_NAME = re.compile(r"receipt_v(0|[1-9][0-9]*)\.txt")


@dataclass
class SidecarsRead:
    """Analyses and receipts by checkpoint, and the files that could not be used."""

    analyses: dict[int, dict[str, Any]] = field(default_factory=dict)
    receipts: dict[int, str] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)


def parse_analysis(data: bytes) -> dict[str, Any]:
    value = loads(data)  # what Python's json reads, as the analysis a user wrote it
    if not isinstance(value, dict):
        raise ValueError(f"analysis must be a JSON object (got {type(value).__name__})")
    if not storable(json.dumps(value, ensure_ascii=False)):  # no state could hold it
        raise ValueError(UNSTORABLE)
    return value


def parse_receipt(data: bytes) -> str:
    """The receipt's text; one trailing newline (as editors write it) is dropped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    return text.removesuffix("\n").removesuffix("\r")


@dataclass(frozen=True)
class _Kind:
    folder: str
    pattern: re.Pattern[str]
    template: str
    parse: Callable[[bytes], Any]


_ANALYSES = _Kind(ANALYSES_DIR, ANALYSIS_NAME, "analysis_v<int>.json", parse_analysis)
_RECEIPTS = _Kind(RECEIPTS_DIR, RECEIPT_NAME, "receipt_v<int>.txt", parse_receipt)


def _read_kind(
    run_dir: AnyPath,
    run: str,
    kind: _Kind,
    into: dict[int, Any],
    result: SidecarsRead,
    strict: bool,
) -> None:
    path = run_dir / kind.folder
    if not path.is_dir():
        return
    try:
        entries = sorted(path.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        result.ignored[f"{kind.folder}/"] = f"unreadable: {exc.strerror or exc}"
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        shown = f"{kind.folder}/{entry.name}"
        match = kind.pattern.fullmatch(entry.name)
        if not match:
            result.ignored[shown] = f"name is not {kind.template}"
            continue
        display = f"{run}/{shown}"
        try:
            data = read_run_file(entry, run_dir)  # never a FIFO, never out of the run
        except OSError as exc:
            error = f"unreadable: {exc.strerror or exc}"
            reject = Reject(file=display, line=None, error=error, raw=None)
        else:
            try:
                into[int(match.group(1))] = kind.parse(data)
                continue
            except ValueError as exc:
                reject = Reject(
                    file=display, line=None, error=str(exc), raw=escape_bytes(data[:RAW_LIMIT])
                )
        if strict:
            raise BadRecordError(reject.describe())
        result.rejects.append(reject)


def read_sidecars(run_dir: AnyPath, run: str, strict: bool = False) -> SidecarsRead:
    """The run's analyses and receipts by checkpoint; runs without them get empty maps."""
    result = SidecarsRead()
    _read_kind(run_dir, run, _ANALYSES, result.analyses, result, strict)
    _read_kind(run_dir, run, _RECEIPTS, result.receipts, result, strict)
    return result
