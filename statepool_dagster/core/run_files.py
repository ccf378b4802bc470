"""Find run folders under the runs root and fingerprint their files."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .run_names import run_name_problem

EPISODES_FILE = "episodes.jsonl"
SNAPSHOTS_DIR = "snapshots"


def natural_key(name: str) -> list[int | str]:
    """Sort key that puts run2 before run10."""
    return [int(part) if part.isdecimal() else part for part in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class RunDir:
    """A run folder that can become a partition."""

    name: str
    path: Path
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


def looks_like_run(path: Path) -> bool:
    """A run folder holds ``episodes.jsonl`` or a ``snapshots/`` folder (or both)."""
    return (path / EPISODES_FILE).is_file() or (path / SNAPSHOTS_DIR).is_dir()


def discover_runs(runs_root: Path) -> Discovery:
    """Every run folder directly under ``runs_root``; hidden folders and files are ignored."""
    found = Discovery()
    try:
        entries = list(os.scandir(runs_root))
    except FileNotFoundError:
        found.problems.append(f"runs folder {runs_root} does not exist")
        return found
    except OSError as exc:
        found.problems.append(f"runs folder {runs_root} unreadable: {exc.strerror}")
        return found
    for entry in entries:
        name = entry.name
        if name.startswith("."):
            continue
        try:
            if not entry.is_dir() or not looks_like_run(Path(entry.path)):
                continue
            is_link = entry.is_symlink()
        except OSError as exc:
            found.problems.append(f"{name}: unreadable ({exc.strerror}); skipped")
            continue
        problem = run_name_problem(name)
        if problem:
            found.invalid[name] = problem
            continue
        found.runs.append(RunDir(name, Path(entry.path), is_link))
    found.runs.sort(key=lambda r: natural_key(r.name))
    return found


@dataclass(frozen=True)
class Fingerprint:
    """A digest of a run's file names, sizes and mtimes, and the newest mtime seen."""

    digest: str
    newest_mtime: float
    files: int


def fingerprint_run(run_path: Path) -> Fingerprint:
    """Fingerprint the files of a run folder and of its direct subfolders (cheap: stat only)."""
    h = hashlib.blake2b(digest_size=10)
    newest = 0.0
    count = 0
    stack: list[tuple[str, str]] = [("", str(run_path))]
    depth_of = {"": 0}
    rows: list[str] = []
    while stack:
        rel, path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            rows.append(f"{rel}/!unreadable")
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel_name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir():
                    if depth_of[rel] == 0:
                        depth_of[rel_name] = 1
                        stack.append((rel_name, entry.path))
                    continue
                st = entry.stat()
            except OSError:
                rows.append(f"{rel_name}!vanished")
                continue
            rows.append(f"{rel_name}\0{st.st_size}\0{st.st_mtime_ns}")
            newest = max(newest, st.st_mtime)
            count += 1
    for row in sorted(rows):
        h.update(row.encode("utf-8", "surrogateescape"))
        h.update(b"\n")
    return Fingerprint(h.hexdigest(), newest, count)
