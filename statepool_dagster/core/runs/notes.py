"""Plain-words remarks about a run folder's shape, shown with its materializations."""

from __future__ import annotations

import os

from ..locations import AnyPath, is_local
from ..names import EPISODES_FILE, SNAPSHOTS_DIR
from .opening import run_file_problem


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
