"""Find run folders under the runs root and fingerprint their files.

The runs root is a local folder (``os.scandir``, ``stat``) or any fsspec URL
(listings with ``info()`` details: size, mtime and ETag where the backend has them).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..locations import AnyPath, Stamp, as_path, entry_name, info_fields, is_local
from ..names import EPISODES_FILE, SNAPSHOTS_DIR, run_name_problem


def natural_key(name: str) -> list[int | str]:
    """Sort key that puts run2 before run10."""
    return [int(part) if part.isdecimal() else part for part in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class RunDir:
    """A run folder that can become a partition."""

    name: str
    path: AnyPath
    is_symlink: bool = False


@dataclass
class Discovery:
    """Run folders found under the runs root, and the ones that cannot be partitions."""

    runs: list[RunDir] = field(default_factory=list)
    invalid: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]


def looks_like_run(path: AnyPath) -> bool:
    """A run folder holds ``episodes.jsonl`` or a ``snapshots/`` folder (or both).

    Locally any ``episodes.jsonl`` entry counts, even one that cannot be read (a FIFO, a
    link loop): the run then shows a reject saying why instead of silently not existing.
    """
    episodes = path / EPISODES_FILE
    if is_local(path):
        return os.path.lexists(episodes) or (path / SNAPSHOTS_DIR).is_dir()
    return episodes.is_file() or (path / SNAPSHOTS_DIR).is_dir()


def _listing(folder: AnyPath) -> list[dict[str, Any]]:
    """An fsspec folder's entries with their details, never from a stale listings cache."""
    own = folder.path.rstrip("/")
    folder.fs.invalidate_cache(folder.path)
    return [
        info
        for info in folder.fs.ls(folder.path, detail=True)
        if str(info["name"]).rstrip("/") != own and entry_name(info)
    ]


def discover_runs(runs_root: AnyPath | str) -> Discovery:
    """Every run folder directly under ``runs_root``; hidden folders and files are ignored."""
    runs_root = as_path(runs_root)
    found = Discovery()
    try:
        if is_local(runs_root):
            entries = [(e.name, partial(_local_run, e)) for e in os.scandir(runs_root)]
        else:
            runs_root.fs.invalidate_cache()  # a long-lived sensor must see files added since
            listing = _listing(runs_root)
            entries = [(entry_name(i), partial(_fsspec_run, runs_root, i)) for i in listing]
    except FileNotFoundError:
        found.problems.append(f"runs folder {runs_root} does not exist")
        entries = []
    except OSError as exc:
        found.problems.append(f"runs folder {runs_root} unreadable: {exc.strerror or exc}")
        entries = []
    for name, run_dir in entries:
        if name.startswith("."):
            continue
        try:
            run = run_dir()
        except OSError as exc:
            found.problems.append(f"{name}: unreadable ({exc.strerror or exc}); skipped")
            continue
        problem = run_name_problem(name)
        if run is not None and problem:
            found.invalid[name] = problem
        elif run is not None:
            found.runs.append(run)
    found.runs.sort(key=lambda r: natural_key(r.name))
    return found


def _local_run(entry: os.DirEntry) -> RunDir | None:
    """The run folder ``entry`` is, or None when it is no run folder (may raise OSError)."""
    if not entry.is_dir() or not looks_like_run(Path(entry.path)):
        return None
    return RunDir(entry.name, Path(entry.path), entry.is_symlink())


def _fsspec_run(root: AnyPath, info: dict[str, Any]) -> RunDir | None:
    path = root / entry_name(info)
    if info.get("type") != "directory" or not looks_like_run(path):
        return None
    return RunDir(entry_name(info), path)


# Bump when the readers keep or refuse differently what the same bytes hold: every run's
# fingerprint changes, so a sync re-reads runs it would call unchanged, and the stages'
# part keys (which include it) change, so nothing read under the old rules is kept.
READER_VERSION = "2"


@dataclass(frozen=True)
class Fingerprint:
    """A digest of a run's file names, sizes and mtimes, and the newest mtime seen.

    ``stamps``: each file's :class:`Stamp` as it was seen, as text, by its path in the run.
    """

    digest: str
    newest_mtime: float
    files: int
    stamps: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


def fingerprint_run(run_path: AnyPath) -> Fingerprint:
    """Fingerprint the files of a run folder and of its direct subfolders (cheap: stat only)."""
    if not is_local(run_path):
        return _fingerprint_fsspec(run_path)
    h = hashlib.blake2b(digest_size=10)
    h.update(f"reader {READER_VERSION}\n".encode())
    newest, newest_ns = 0.0, -1
    stack: list[tuple[str, str]] = [("", str(run_path))]
    rows: list[str] = []
    stamps: dict[str, str] = {}
    while stack:
        rel, path = stack.pop()
        try:
            # Listed through the folder's descriptor: each stat is then resolved from the
            # folder, not from the root again (a long run's snapshots are hundreds of files).
            fd = os.open(path, _FOLDER)
        except OSError:
            rows.append(f"{rel}/!unreadable")
            continue
        try:
            entries = list(os.scandir(fd))
            prefix = f"{rel}/" if rel else ""
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                rel_name = prefix + name
                try:
                    if entry.is_dir():
                        if not rel:  # the run's own subfolders, not theirs
                            stack.append((rel_name, os.path.join(path, name)))
                        continue
                    st = entry.stat()
                except OSError:
                    rows.append(f"{rel_name}!vanished")
                    continue
                size, ns = st.st_size, st.st_mtime_ns
                rows.append(f"{rel_name}\0{size}\0{ns}")
                stamps[rel_name] = str(Stamp.of_stat(st))
                if ns > newest_ns:
                    newest_ns, newest = ns, st.st_mtime
        except OSError:
            rows.append(f"{rel}/!unreadable")
        finally:
            os.close(fd)
    if rows:  # each row and a newline, hashed in one update
        h.update(("\n".join(sorted(rows)) + "\n").encode("utf-8", "surrogateescape"))
    return Fingerprint(h.hexdigest(), newest, len(stamps), stamps)


_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _fingerprint_fsspec(run_path: AnyPath) -> Fingerprint:
    newest = 0.0
    count = 0
    stack: list[tuple[str, AnyPath]] = [("", run_path)]
    rows: list[str] = []
    stamps: dict[str, str] = {}
    while stack:
        rel, folder = stack.pop()
        try:
            entries = _listing(folder)
        except OSError:
            rows.append(f"{rel}/!unreadable")
            continue
        for info in entries:
            name = entry_name(info)
            if name.startswith("."):
                continue
            rel_name = f"{rel}/{name}" if rel else name
            if info.get("type") == "directory":
                if not rel:
                    stack.append((rel_name, folder / name))
                continue
            size, mtime, tag = info_fields(info)
            stamp = Stamp(size, int(mtime * 1e9), tag=tag)
            rows.append(f"{rel_name}\0{size}\0{stamp.mtime_ns}\0{tag}")
            stamps[rel_name] = str(stamp)
            newest = max(newest, mtime)
            count += 1
    h = hashlib.blake2b(digest_size=10)
    h.update(f"reader {READER_VERSION}\n".encode())
    for row in sorted(rows):
        h.update(row.encode("utf-8", "surrogateescape"))
        h.update(b"\n")
    return Fingerprint(h.hexdigest(), newest, count, stamps)
