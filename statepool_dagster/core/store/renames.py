"""Atomic renames Python lacks (Linux ``renameat2``): swap two paths, move without replacing."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from pathlib import Path

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
