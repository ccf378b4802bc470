"""Where each kind of file lives under the store root, and the per-run writer lock."""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..locations import AnyPath, as_path, forget_listing, is_local
from ..names import EXPORTS, LOCKS, REJECTS_DIR, STATE_POOL
from ..runs.names import check_run_name
from .locks import file_lock


class StoreLayout:
    """Where each kind of file lives under the store root; run names are checked first.

    The root is a local folder or an fsspec URL (see ``core/locations.py``). A layout is
    meant for one build or one read: the local paths it checked are remembered.
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = as_path(root)
        self.local = is_local(self.root)
        self._checked: dict[tuple[str, ...], AnyPath] = {}
        self._locks: dict[str, tuple[Path, str]] = {}  # run -> its lock file, resolved

    def _inside(self, *parts: str) -> AnyPath:
        if self.local:
            path = self._checked.get(parts)
            if path is None:
                path = self._checked[parts] = self._inside_local(parts)
            return path
        path = self.root.joinpath(*parts)
        base = self.root.path.rstrip("/")
        joined = posixpath.normpath(posixpath.join(base, *parts))
        if any(p in ("", ".", "..") or "/" in p or "\\" in p for p in parts) or not (
            joined.startswith(base + "/")
        ):
            raise ValueError(f"path {path} would leave the store root {self.root}")
        return path

    def _inside_local(self, parts: tuple[str, ...]) -> AnyPath:
        path = self.root.joinpath(*parts)
        root = self._checked.get(())
        if root is None:
            root = self._checked[()] = self.root.resolve()
        if _plain(self.root, parts):  # resolves to root/parts: inside (a few lstats, no walk)
            return path
        if not path.resolve().is_relative_to(root):
            raise ValueError(f"path {path} would leave the store root {root}")
        return path

    def table(self, asset: str, run: str) -> AnyPath:
        """A run's table: a folder of per-checkpoint Parquet parts (see ``store/parts.py``)."""
        return self._inside(asset, check_run_name(run))

    def state_pool(self, run: str) -> AnyPath:
        return self._inside(STATE_POOL, check_run_name(run))

    def rejects(self, run: str) -> AnyPath:
        return self._inside(REJECTS_DIR, f"{check_run_name(run)}.jsonl")

    def exports(self) -> AnyPath:
        return self._inside(EXPORTS)

    def runs_with(self, asset: str) -> list[str]:
        """Runs that have a table for ``asset``, temp files ignored."""
        folder = self.root / asset
        forget_listing(folder)
        if not folder.is_dir():
            return []
        return [p.name for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir()]

    def _lock_file(self, run: str) -> Path:
        name = f"{check_run_name(run)}.lock"
        if self.local:
            return self._inside(LOCKS, name)
        # No flock on an object store: a local file per store URL serialises this machine.
        key = hashlib.blake2b(str(self.root).encode(), digest_size=10).hexdigest()
        return Path(tempfile.gettempdir()) / f"statepool-locks-{os.getuid()}" / key / name

    @contextlib.contextmanager
    def lock(self, run: str) -> Iterator[None]:
        """Serialise writers of one run's files, even from processes outside the run queue.

        Re-entrant within a process: ``statepool sync`` holds it around a whole run
        while the assets inside take it again for their own writes. For a store on
        an object store the lock covers one machine only; across machines the run
        queue's limit of one run per partition keeps writers apart.
        """
        held = self._locks.get(run)
        if held is None:
            path = self._lock_file(run)
            held = self._locks[run] = (path, str(path.resolve()))
        path, key = held
        if key in _HELD:
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        with file_lock(path):
            _HELD[key] = 1
            try:
                yield
            finally:
                del _HELD[key]


def _plain(root: Path, parts: tuple[str, ...]) -> bool:
    """Whether each of ``parts`` under ``root`` is a plain name that is no link (or is not
    there yet): the path then resolves to the root's own resolution joined with them."""
    at = os.fspath(root)
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\\" in part:
            return False
        at = os.path.join(at, part)
        try:
            if stat.S_ISLNK(os.lstat(at).st_mode):
                return False
        except FileNotFoundError:
            return True  # nothing below it exists either
        except OSError:
            return False
    return True


_HELD: dict[str, int] = {}  # lock files this process holds, with their depth
