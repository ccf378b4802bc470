"""Pool versions: what a live pool served, in its order, kept for the checkpoints that name them.

A version is the served states' ids in the served order and each one's row key (a digest
of :attr:`Entry.row_key`: it changes when the row's content may have). It is written to
``<store>/pool_versions/<time>-<digest>.parquet`` when a trainer saves a checkpoint (the
same content is never written twice) and is read back by ``LivePool(..., as_of=...)``.
Names sort by time: versions are monotonic in the store's own order.

Growth is bounded: each write removes the versions older than ``keep_days`` beyond the
newest ``keep`` (the settings ``keep_versions`` and ``keep_version_days``: by default 100
versions and 30 days). A version holds an id and a digest a state, compressed.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass

import pyarrow as pa

from ..core import AnyPath, as_path, forget_listing, is_local
from ..core.names import POOL_VERSIONS
from ..core.store import read_parquet, write_parquet_atomic

SCHEMA = pa.schema([("state_id", pa.string()), ("row_key", pa.string())])
KEEP_VERSIONS = 100
KEEP_DAYS = 30.0
_NAME = re.compile(r"\d{13}-[0-9a-f]{16}\.parquet")  # <ms since the epoch>-<digest>


class VersionGone(LookupError):
    """A pool version a checkpoint names is no longer in the store."""


@dataclass(frozen=True)
class PoolVersion:
    """One version: its id and the states served, in order, with their row keys."""

    id: str
    state_ids: list[str]
    row_keys: list[str]


def row_key_digest(row_key: tuple) -> str:
    """A served row's key as a short stable text (the version's ``row_key`` column)."""
    return hashlib.blake2b(repr(row_key).encode(), digest_size=8).hexdigest()


def versions_folder(store: str | os.PathLike[str] | AnyPath) -> AnyPath:
    return as_path(store) / POOL_VERSIONS


def _listed(folder: AnyPath) -> list[str]:
    forget_listing(folder)
    try:
        return sorted(p.name for p in folder.iterdir() if _NAME.fullmatch(p.name))
    except (FileNotFoundError, NotADirectoryError):
        return []


def save_version(
    store: str | os.PathLike[str] | AnyPath,
    state_ids: list[str],
    row_keys: list[str],
    keep: int = KEEP_VERSIONS,
    keep_days: float = KEEP_DAYS,
) -> str:
    """Keep this served order in the store (once per content); its version id."""
    digest = hashlib.blake2b(digest_size=8)
    for sid, key in zip(state_ids, row_keys, strict=True):
        digest.update(sid.encode() + b"\0" + key.encode() + b"\n")
    folder = versions_folder(store)
    names = _listed(folder)
    tail = f"-{digest.hexdigest()}.parquet"
    kept = set(names[-keep:]) | {n for n in names if _age_ms(n) >= _cutoff_ms(keep_days)}
    same = [n for n in names if n.endswith(tail) and n in kept]  # not one pruned soon
    if same:
        return same[-1].removesuffix(".parquet")
    newest = int(names[-1].split("-", 1)[0]) if names else 0
    name = f"{max(time.time_ns() // 1_000_000, newest + 1):013d}{tail}"  # names sort by age
    table = pa.table({"state_id": state_ids, "row_key": row_keys}, schema=SCHEMA)
    write_parquet_atomic(folder / name, table)
    _prune(folder, [*names, name], keep, keep_days)
    return name.removesuffix(".parquet")


def _cutoff_ms(keep_days: float) -> float:
    return (time.time() - keep_days * 86400) * 1000


def _age_ms(name: str) -> int:
    """A version's time of writing, from its name (milliseconds since the epoch)."""
    return int(name.split("-", 1)[0])


def _prune(folder: AnyPath, names: list[str], keep: int, keep_days: float) -> None:
    cutoff = _cutoff_ms(keep_days)
    for name in sorted(names)[: max(len(names) - keep, 0)]:
        if _age_ms(name) < cutoff:
            path = folder / name
            if is_local(path):
                path.unlink(missing_ok=True)
            else:
                path.fs.rm_file(path.path)


def load_version(store: str | os.PathLike[str] | AnyPath, version: str) -> PoolVersion:
    """The version ``version`` of the pool in ``store``; :class:`VersionGone` when the store
    no longer keeps it."""
    if not version or "/" in version or version.startswith("."):
        raise ValueError(f"pool version {version!r}: not a version id")
    try:
        table = read_parquet(versions_folder(store) / f"{version}.parquet")
    except FileNotFoundError:
        raise VersionGone(
            f"pool version {version} is no longer in {as_path(store)}/{POOL_VERSIONS}: the "
            f"store keeps the newest STATEPOOL_KEEP_VERSIONS ({KEEP_VERSIONS}) and every one "
            f"younger than STATEPOOL_KEEP_VERSION_DAYS ({KEEP_DAYS:g}) days; resume from the "
            "latest pool instead (resume_from_latest=True)"
        ) from None
    return PoolVersion(version, table["state_id"].to_pylist(), table["row_key"].to_pylist())
