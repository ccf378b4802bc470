"""Where the runs folder and the store live: a local folder, or any fsspec filesystem.

Plain paths and ``file://`` URLs become :class:`pathlib.Path` and keep the local fast
path (``os.scandir``, renames, ``flock``). Any other URL (``s3://bucket/prefix``,
``gs://…``, ``memory://…``, ``local://…``) becomes a :class:`upath.UPath` and goes
through fsspec. ``local://`` is fsspec's own name for the local disk: it takes the
fsspec path on purpose (object-store semantics on a local folder).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from upath import UPath

    AnyPath: TypeAlias = Path | UPath
else:
    AnyPath = Path  # only ever an annotation; upath is imported once a URL needs it

_FILE_URL = "file://"


def as_path(location: str | os.PathLike[str]) -> AnyPath:
    """A local ``Path`` for a plain path or ``file://`` URL, a ``UPath`` for any other URL."""
    if isinstance(location, Path):
        return location
    if _is_upath(location):
        if location.protocol == "file":
            return Path(location.path)
        return location
    text = os.fspath(location)
    if text.startswith(_FILE_URL):
        rest = text[len(_FILE_URL) :]
        return Path(rest[len("localhost") :] if rest.startswith("localhost/") else rest)
    if "://" not in text and "::" not in text:
        return Path(text)
    from upath import UPath

    return UPath(text)


def _is_upath(value: object) -> bool:
    return type(value).__module__.startswith("upath.")


def is_local(path: AnyPath) -> bool:
    """True for a local ``Path`` (renames, ``flock``); false for an fsspec ``UPath``."""
    return isinstance(path, Path)


def shared_between_processes(path: AnyPath) -> bool:
    """Whether a forked worker's writes under ``path`` reach its parent (not for ``memory://``)."""
    return is_local(path) or path.protocol != "memory"


def absolute(path: AnyPath) -> AnyPath:
    """``path`` resolved on a local disk; a URL is already absolute."""
    return path.resolve() if is_local(path) else path


def entry_name(info: dict[str, Any]) -> str:
    """The last part of an fsspec listing entry's name."""
    return posixpath.basename(str(info["name"]).rstrip("/"))


def fresh_listing(folder: AnyPath) -> list[dict[str, Any]]:
    """An fsspec folder's entries with their details, listed now: never from the listings
    cache, which would hide what other processes wrote since (an object store's new files).
    """
    try:
        return folder.fs.ls(folder.path, detail=True, refresh=True)
    except TypeError:  # a backend without listings-cache refresh
        return folder.fs.ls(folder.path, detail=True)


def forget_listing(folder: AnyPath) -> None:
    """Drop fsspec's cached listing of ``folder`` before listing it again (``iterdir``): a
    long-lived process (a sensor, a trainer) must see what other processes wrote since."""
    if not is_local(folder):
        folder.fs.invalidate_cache(folder.path)


def forget_tree(folder: AnyPath) -> None:
    """Drop fsspec's cached listings of ``folder``, of every folder under it and of its parents.

    fsspec's ``find`` fills in a sub-folder's listing only where none is cached, so a
    sub-folder listed before keeps its old entries: a file rewritten since keeps its old
    size and ETag there, and a read of it asks for a version that no longer exists.
    """
    if is_local(folder):
        return
    fs, base = folder.fs, folder.path.rstrip("/")
    cache = getattr(fs, "dircache", None)
    if cache is not None:
        for key in [k for k in list(cache) if k == base or k.startswith(base + "/")]:
            cache.pop(key, None)
    fs.invalidate_cache(folder.path)


def read_fresh(path: AnyPath) -> bytes:
    """A small file other processes rewrite (an index, a manifest), as it is now: through
    fsspec one plain GET, never a read checked against a cached listing's size or ETag.
    ``FileNotFoundError`` when it is not there; any other error means it could not be read."""
    if is_local(path):
        return path.read_bytes()
    return path.fs.cat_file(path.path)


@functools.cache
def storage_errors() -> tuple[type[BaseException], ...]:
    """What a storage client raises when a store cannot be read: ``OSError`` (fsspec's own,
    a local disk's), a cut HTTP response, and botocore's and aiohttp's errors, which s3fs
    lets through as they are (a refused or reset connection, a read timeout)."""
    import http.client

    errors: list[type[BaseException]] = [OSError, http.client.HTTPException]
    for module, name in (("botocore.exceptions", "BotoCoreError"), ("aiohttp", "ClientError")):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except ImportError:
            continue
    return tuple(errors)


# What a file opened by ``open_ranged`` fetches past a read, at most.
RANGED_BLOCK = 1 << 20


def open_ranged(path: AnyPath, mode: str = "rb"):
    """An fsspec file opened for reads at chosen places (a Parquet footer and a few row
    groups, one line of a segment): each read fetches at most :data:`RANGED_BLOCK` past
    what it asks, not the backend's read-ahead block (s3fs's 50 MiB suits whole files)."""
    return path.open(mode, block_size=RANGED_BLOCK)


_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created")
_TAG_KEYS = ("ETag", "etag", "md5Hash", "generation", "version_id", "VersionId")


def _epoch(value: Any) -> float:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.timestamp()
    if isinstance(value, str):
        return _epoch(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
    return float(value)


def info_fields(info: dict[str, Any]) -> tuple[int, float, str]:
    """``(size, mtime, tag)`` of an fsspec ``info()`` entry; backends name these differently.

    The tag (ETag, generation, …) changes with every rewrite where the mtime is too coarse.
    """
    size = int(info.get("size") or 0)
    mtime = 0.0
    for key in _MTIME_KEYS:
        if info.get(key) is not None:
            try:
                mtime = _epoch(info[key])
                break
            except (TypeError, ValueError):
                continue
    tag = next((str(info[k]) for k in _TAG_KEYS if info.get(k) is not None), "")
    return size, mtime, tag


class Stamp(NamedTuple):
    """What tells one version of a file from the next without reading it.

    Locally its size, mtime and inode (a file replaced by a rename has a new inode); through
    fsspec its size, mtime and tag (:func:`info_fields`). ``str()`` is the form the store
    records (the snapshots table's ``file_stamp`` column, a run's fingerprint, part keys):
    ``size:mtime_ns`` locally, ``size:mtime_ns:tag`` through fsspec.
    """

    size: int
    mtime_ns: int
    ino: int = 0
    tag: str | None = None  # through fsspec only ("" for a backend that keeps none)

    def __str__(self) -> str:
        if self.tag is None:
            return f"{self.size}:{self.mtime_ns}"
        return f"{self.size}:{self.mtime_ns}:{self.tag}"

    @classmethod
    def of_stat(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)

    @classmethod
    def of_info(cls, info: dict[str, Any]) -> Stamp:
        size, mtime, tag = info_fields(info)
        return cls(size, int(mtime * 1e9), tag=tag)


def file_stamp(path: AnyPath | str) -> Stamp | None:
    """One file's :class:`Stamp`; ``None`` when it is absent or cannot be read (one of
    :func:`storage_errors`). A string is a local path: no ``Path`` is built for it."""
    if isinstance(path, str) or is_local(path):
        try:  # a local disk raises OSError alone: no storage client is imported for it
            return Stamp.of_stat(os.stat(path))
        except OSError:
            return None
    try:
        forget_listing(path.parent)  # an object store's rewrite since the last listing
        return Stamp.of_info(path.fs.info(path.path))
    except storage_errors():
        return None


def upload_tree(local_dir: Path, target: AnyPath) -> int:
    """Copy the files under ``local_dir`` to ``target``, same relative names; returns the count."""
    count = 0
    for path in sorted(p for p in local_dir.rglob("*") if p.is_file()):
        dest = target.joinpath(*path.relative_to(local_dir).parts)
        if is_local(dest):
            dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(path.read_bytes())
        count += 1
    return count
