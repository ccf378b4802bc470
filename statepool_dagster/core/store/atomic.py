"""Atomic writes, on a local disk or an object store: Parquet and JSON, never pickle.

Readers see either the old or the new version of a file or folder, never a torn
one. On a local disk files are written to a dot-named sibling and renamed into
place, and a folder is swapped in whole. On any other fsspec filesystem (object
stores) each file is one object written whole in a single put, and a folder's files
are written before the manifest that names them: readers go by the manifest, and
files it no longer names are deleted after it is written.

The atomic renames Python lacks are here too (Linux ``renameat2``): swap two paths,
move without replacing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import io
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StatepoolError
from ..locations import AnyPath, is_local
from ..names import DIR_MANIFEST

if TYPE_CHECKING:  # Arrow is imported by the Parquet functions alone: the JSON ones are light
    import pyarrow as pa


def temp_sibling(path: Path) -> Path:
    """A hidden name beside ``path``: readers skip dot files, so it is never seen half-written."""
    return path.with_name(f".{path.name}.tmp-{os.urandom(6).hex()}")


def _make_folder(folder: AnyPath) -> None:
    with contextlib.suppress(FileExistsError):  # an object store's "folder" is only a prefix
        folder.mkdir(parents=True, exist_ok=True)


def _put(path: AnyPath, data: bytes) -> None:
    """One object written whole in one ``open('wb')``: an object store publishes it complete."""
    with path.open("wb") as f:
        f.write(data)


def put_new(path: AnyPath, data: bytes) -> bool:
    """Write ``path`` whole unless it exists; ``False`` (nothing written) when it does.

    Exclusive where the filesystem can refuse an existing name (``xb``: S3's conditional
    put, ``If-None-Match: *``); elsewhere a check, then one put.
    """
    try:
        with path.open("xb") as f:
            f.write(data)
        return True
    except FileExistsError:
        return False
    except (ValueError, NotImplementedError):  # no exclusive mode on this filesystem
        if path.exists():
            return False
        _put(path, data)
        return True


def write_bytes_atomic(path: AnyPath, data: bytes) -> None:
    if not is_local(path):
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        _make_folder(path.parent)
        _put(path, data)
        return
    tmp = temp_sibling(path)
    try:
        try:
            fd = os.open(tmp, _NEW_FILE, 0o666)
        except FileNotFoundError:  # the folder's first file
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, _NEW_FILE, 0o666)
        try:  # written as it is, without a buffered file around it (a state file: one call)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def parquet_bytes(table: pa.Table) -> bytes:
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def write_parquet_atomic(path: AnyPath, table: pa.Table) -> None:
    if not is_local(path):
        _make_folder(path.parent)
        _put(path, parquet_bytes(table))
        return
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_parquet(path: AnyPath, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file of the store, from a local disk or through fsspec."""
    import pyarrow.parquet as pq

    if is_local(path):  # one file: skip the dataset machinery of read_table
        with pq.ParquetFile(path) as parquet:
            return parquet.read(columns=columns)
    with path.open("rb") as f, pq.ParquetFile(f) as parquet:
        return parquet.read(columns=columns)


def replace_dir_atomic(final: AnyPath, files: Iterable[tuple[str, bytes]]) -> int:
    """Make ``final`` a folder holding exactly ``files``, swapped in whole; returns the count.

    Through fsspec: the files first, one put each, then the manifest naming them, then
    the files it no longer names are deleted.
    """
    if not is_local(final):
        return _replace_dir_by_manifest(final, files)
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
        elif not exchange(staging, final):
            # No atomic swap on this system: move the old folder aside (a brief gap, never torn).
            old = temp_sibling(final)
            os.replace(final, old)
            os.replace(staging, final)
            staging = old
        # After a swap or the fallback, ``staging`` holds the old folder.
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return count


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _entries(folder: AnyPath) -> list[AnyPath]:
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _replace_dir_by_manifest(final: AnyPath, files: Iterable[tuple[str, bytes]]) -> int:
    _make_folder(final)
    written: dict[str, str] = {}
    for name, data in files:
        _put(final / name, data)
        written[name] = _digest(data)
    publish_manifest(final, written)
    return len(written)


def publish_manifest(final: AnyPath, written: dict[str, str]) -> None:
    """Write ``final``'s manifest of ``written`` (name: digest), then remove what it does not
    name: readers trust the manifest, so it goes in before anything old goes out."""
    manifest = json.dumps({"files": written}, ensure_ascii=False, indent=1, sort_keys=True)
    _put(final / DIR_MANIFEST, manifest.encode("utf-8"))
    for entry in _entries(final):
        if entry.name in written or entry.name == DIR_MANIFEST:
            continue
        if entry.is_dir():
            entry.fs.rm(entry.path, recursive=True)
        else:
            entry.unlink(missing_ok=True)


# How long a reader waits for a writer to finish a folder it is rewriting (seconds).
READ_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0)


def read_dir_files(folder: AnyPath, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The files of a folder ``replace_dir_atomic`` wrote (``{name: bytes}``), dot files skipped.

    Through fsspec, only the files its manifest names, each checked against the
    manifest's digest: a folder being rewritten is read again until it is whole.
    """
    if is_local(folder) or not (folder / DIR_MANIFEST).is_file():
        names = [p.name for p in _entries(folder) if not p.name.startswith(".")]
        return {n: (folder / n).read_bytes() for n in names if wanted(n)}
    for delay in (*READ_RETRY_DELAYS, None):
        try:
            named = json.loads((folder / DIR_MANIFEST).read_bytes())["files"]
            files = {n: (folder / n).read_bytes() for n in named if wanted(n)}
            if all(_digest(data) == named[n] for n, data in files.items()):
                return files
        except FileNotFoundError:
            pass
        if delay is not None:
            time.sleep(delay)
    raise StatepoolError(
        f"{folder}: its files do not match its manifest ({DIR_MANIFEST}): a write is in "
        "progress or was interrupted (materializing again repairs it)"
    )


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


@functools.cache
def libc_function(name: str):
    """A function of the C library (Linux system calls Python lacks), or ``None``.

    Looked up in the process's own symbols first: ``ctypes.util.find_library`` would run
    ``ldconfig`` in every worker a sync forks.
    """
    for library in (None, "libc.so.6"):
        try:
            return getattr(ctypes.CDLL(library, use_errno=True), name)
        except (OSError, AttributeError):
            continue
    return None


def _renameat2(a: Path, b: Path, flags: int) -> bool | None:
    """``renameat2(a, b, flags)``: whether it moved; ``None`` where there is no ``renameat2``."""
    renameat2 = libc_function("renameat2")
    if renameat2 is None:
        return None
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; ``False`` where unsupported (the caller falls back)."""
    return bool(_renameat2(a, b, _RENAME_EXCHANGE))


def move_new(tmp: Path, final: Path) -> bool:
    """Move ``tmp`` to ``final`` unless ``final`` exists (``False`` then), atomically.

    Without ``renameat2`` (or on a filesystem without it) a hard link, exclusive too.
    """
    moved = _renameat2(tmp, final, _RENAME_NOREPLACE)
    if moved:
        return True
    if moved is False and ctypes.get_errno() == errno.EEXIST:
        return False
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    os.unlink(tmp)
    return True
