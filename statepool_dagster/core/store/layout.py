"""Where each kind of file lives under the store root; the per-run writer lock (``flock``);
a run's state files and rejects: ``state_pool/<run>/*.json`` and ``rejects/<run>.jsonl``."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import posixpath
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ..locations import AnyPath, as_path, forget_listing, is_local
from ..names import DIR_MANIFEST, EXPORTS, LOCKS, REJECTS_DIR, STATE_POOL, check_run_name
from ..rejects import Reject
from ..states.models import BytesLike
from .atomic import _digest, _entries, _make_folder, _put, write_bytes_atomic

_HELD: dict[str, int] = {}  # lock files this process holds, with their depth


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold ``path`` (created, with its folder, if missing) until the block ends; waits while
    another process holds it. Released when the process dies, however it dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


def state_pool_names(layout: StoreLayout, run: str) -> set[str]:
    """The state ids that have a file in ``state_pool/<run>/``."""
    folder = layout.state_pool(run)
    if is_local(folder):
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        return {n[: -len(".json")] for n in names if n.endswith(".json") and n[0] != "."}
    return {
        p.name[: -len(".json")]
        for p in _entries(layout.state_pool(run))
        if p.name.endswith(".json") and not p.name.startswith(".")
    }


def _utf8(text: str | BytesLike) -> BytesLike:
    return text.encode("utf-8") if isinstance(text, str) else text


def write_state_file(layout: StoreLayout, run: str, state_id: str, text: str | BytesLike) -> None:
    """One ``state_pool/<run>/<state_id>.json`` (text, or its UTF-8 bytes), written atomically."""
    write_bytes_atomic(layout.state_pool(run) / f"{state_id}.json", _utf8(text))


def file_digest(text: str | BytesLike) -> str:
    """The digest a folder manifest records for a state file of ``text`` (or its UTF-8 bytes)."""
    return _digest(_utf8(text))


def update_state_pool(
    layout: StoreLayout,
    run: str,
    writes: Mapping[str, str | BytesLike],
    keep: set[str],
    written: dict[str, str] | None = None,
    present: set[str] | None = None,
) -> None:
    """Write each ``writes`` file on its own (atomically), drop the files not kept.

    Files of ``keep`` are left as they are: a new checkpoint writes one file, never the
    folder. ``written``: digests of the files already written one by one this build.
    Through fsspec each file is one put, then the folder's manifest is rewritten.
    ``present``: the state ids that have a file now, if the caller knows (else listed).
    """
    folder = layout.state_pool(run)
    _make_folder(folder)  # a run without states still has its (empty) folder
    if present is None:
        present = state_pool_names(layout, run)
    for sid, text in writes.items():
        write_bytes_atomic(folder / f"{sid}.json", _utf8(text))
    if not is_local(folder):
        fresh = {**(written or {}), **{sid: file_digest(text) for sid, text in writes.items()}}
        _update_manifest(folder, fresh, keep)
    for sid in present - keep - set(writes):
        (folder / f"{sid}.json").unlink(missing_ok=True)


def _update_manifest(folder: AnyPath, fresh: dict[str, str], keep: set[str]) -> None:
    """Rewrite the manifest: ``fresh`` digests, the old ones of unchanged files kept."""
    try:
        named = json.loads((folder / DIR_MANIFEST).read_bytes())["files"]
    except (FileNotFoundError, KeyError, ValueError):
        named = {}
    files = {n: d for n, d in named.items() if n[: -len(".json")] in keep}
    files.update({f"{sid}.json": d for sid, d in fresh.items()})
    for sid in keep:
        name = f"{sid}.json"
        if name not in files and (folder / name).exists():
            files[name] = _digest((folder / name).read_bytes())
    manifest = json.dumps({"files": files}, ensure_ascii=False, indent=1, sort_keys=True)
    _put(folder / DIR_MANIFEST, manifest.encode("utf-8"))


def read_rejects(layout: StoreLayout, run: str, source: str | None = None) -> list[Reject]:
    """The rejects in ``rejects/<run>.jsonl`` (of one ``source`` if given), in written order."""
    path = layout.rejects(run)
    if not path.exists():
        return []
    rejects = []
    for text in _lines(path):
        if not text.strip():
            continue
        record = json.loads(text)
        if record.pop("source", None) == source or source is None:
            rejects.append(Reject.model_validate(record))
    return rejects


# What ``str.splitlines`` also ends a line at and ``json.dumps`` leaves raw in a string.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def reject_line(reject: Reject, source: str) -> str:
    """One JSON line; a rejected line's own ``\u2028`` or ``\x85`` stays escaped, so a reader
    splitting with ``splitlines`` (not only at ``\n``, as ours do) sees one reject per line."""
    record = {**reject.model_dump(), "source": source}
    return json.dumps(record, ensure_ascii=False).translate(_LINE_BREAKS)


def update_rejects(layout: StoreLayout, run: str, source: str, rejects: Iterable[Reject]) -> None:
    """Replace one source's rejects (e.g. ``episodes``) in ``rejects/<run>.jsonl``.

    The file is removed once no source has any rejects left.
    """
    lines = [reject_line(r, source) for r in rejects]
    path = layout.rejects(run)
    if not lines and is_local(path) and not os.path.lexists(path):
        return  # nothing to set aside, nothing set aside before: no lock, no write
    with layout.lock(run):
        kept: list[str] = []
        if path.exists():
            for text in _lines(path):
                if text.strip() and json.loads(text).get("source") != source:
                    kept.append(text)
        kept.extend(lines)
        if kept:
            write_bytes_atomic(path, ("\n".join(kept) + "\n").encode("utf-8"))
        else:
            path.unlink(missing_ok=True)


def _lines(path: AnyPath) -> list[str]:
    """The records of a rejects file: split where its writer split them, at ``\n`` only
    (``splitlines`` would also cut at U+2028 or NEL, which a file from an older version
    may hold raw inside a record)."""
    return path.read_bytes().decode("utf-8").split("\n")
