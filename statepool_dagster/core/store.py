"""The asset store's layout and its atomic writes: Parquet and JSON, never pickle.

Readers see either the old or the new version of a file or folder, never a torn
one: files are written to a dot-named sibling and renamed into place, and a
partition's state folder is swapped in whole.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .rejects import Reject
from .run_names import check_run_name

STATE_POOL = "state_pool"
REJECTS = "rejects"
EXPORTS = "exports"
LOCKS = ".locks"


def temp_sibling(path: Path) -> Path:
    """A hidden name beside ``path``: readers skip dot files, so it is never seen half-written."""
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def libc_function(name: str):
    """A function of the C library (Linux system calls Python lacks), or ``None``."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return getattr(libc, name)
    except (OSError, AttributeError):
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2``); ``False`` where unsupported."""
    renameat2 = libc_function("renameat2")
    if renameat2 is None:
        return False
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def replace_dir_atomic(final: Path, files: Iterable[tuple[str, bytes]]) -> int:
    """Make ``final`` a folder holding exactly ``files``, swapped in whole; returns the count."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = temp_sibling(final)
    staging.mkdir()
    count = 0
    try:
        for name, data in files:
            with open(staging / name, "wb") as f:
                f.write(data)
            count += 1
        if not final.exists():
            os.replace(staging, final)
        elif not _exchange(staging, final):
            # No atomic swap on this system: move the old folder aside (a brief gap, never torn).
            old = temp_sibling(final)
            os.replace(final, old)
            os.replace(staging, final)
            staging = old
        # After a swap or the fallback, ``staging`` holds the old folder.
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return count


class StoreLayout:
    """Where each kind of file lives under the store root; run names are checked first."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def _inside(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise ValueError(f"path {path} would leave the store root {root}")
        return path

    def table(self, asset: str, run: str) -> Path:
        return self._inside(asset, f"{check_run_name(run)}.parquet")

    def state_pool(self, run: str) -> Path:
        return self._inside(STATE_POOL, check_run_name(run))

    def rejects(self, run: str) -> Path:
        return self._inside(REJECTS, f"{check_run_name(run)}.jsonl")

    def exports(self) -> Path:
        return self._inside(EXPORTS)

    def runs_with(self, asset: str) -> list[str]:
        """Runs that have a table for ``asset``, temp files ignored."""
        folder = self.root / asset
        if not folder.is_dir():
            return []
        return [
            p.name[: -len(".parquet")]
            for p in folder.iterdir()
            if p.name.endswith(".parquet") and not p.name.startswith(".")
        ]

    @contextlib.contextmanager
    def lock(self, run: str) -> Iterator[None]:
        """Serialise writers of one run's files, even from processes outside the run queue.

        Re-entrant within a process: ``statepool sync`` holds it around a whole run
        while the assets inside take it again for their own writes.
        """
        import fcntl

        path = self._inside(LOCKS, f"{check_run_name(run)}.lock")
        key = str(path.resolve())
        if key in _HELD:
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _HELD[key] = 1
            try:
                yield
            finally:
                del _HELD[key]
                fcntl.flock(handle, fcntl.LOCK_UN)


_HELD: dict[str, int] = {}  # lock files this process holds, with their depth


def write_state_pool(layout: StoreLayout, run: str, states: Iterable[tuple[str, str]]) -> int:
    """Replace ``state_pool/<run>/`` with one ``<state_id>.json`` per ``(state_id, json)``."""
    files = ((f"{sid}.json", text.encode("utf-8")) for sid, text in states)
    with layout.lock(run):
        return replace_dir_atomic(layout.state_pool(run), files)


def read_rejects(layout: StoreLayout, run: str, source: str) -> list[Reject]:
    """One source's rejects from ``rejects/<run>.jsonl``, in the order they were written."""
    import json

    path = layout.rejects(run)
    if not path.exists():
        return []
    rejects = []
    for text in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(text) if text.strip() else {}
        if record.pop("source", None) == source:
            rejects.append(Reject.model_validate(record))
    return rejects


def update_rejects(layout: StoreLayout, run: str, source: str, lines: list[str]) -> None:
    """Replace one source's rejects (``episodes`` or ``snapshots``) in ``rejects/<run>.jsonl``.

    The file is removed once no source has any rejects left.
    """
    import json

    path = layout.rejects(run)
    with layout.lock(run):
        kept: list[str] = []
        if path.exists():
            for text in path.read_text(encoding="utf-8").splitlines():
                if text.strip() and json.loads(text).get("source") != source:
                    kept.append(text)
        kept.extend(lines)
        if kept:
            write_bytes_atomic(path, ("\n".join(kept) + "\n").encode("utf-8"))
        else:
            path.unlink(missing_ok=True)
