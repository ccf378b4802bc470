"""Plain-words remarks about a run folder's shape, shown with its materializations."""

from __future__ import annotations

from ..locations import AnyPath
from ..names import EPISODES_FILE, SNAPSHOTS_DIR


def run_notes(run_dir: AnyPath) -> list[str]:
    """Plain-words remarks about a run folder's shape (none for a complete, ordinary run)."""
    notes = []
    if run_dir.is_symlink():
        notes.append(f"run folder is a symlink to {run_dir.resolve()} (followed)")
    episodes = run_dir / EPISODES_FILE
    if not episodes.exists():
        notes.append(f"no {EPISODES_FILE}: the run has no episodes yet")
    elif episodes.is_file() and episodes.stat().st_size == 0:
        notes.append(f"{EPISODES_FILE} is empty")
    if not (run_dir / SNAPSHOTS_DIR).is_dir():
        notes.append(f"no {SNAPSHOTS_DIR}/ folder: the run has no checkpoints yet")
    return notes
