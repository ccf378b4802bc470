"""Read a whole run folder into checkpoint states: the core path, without Dagster."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .episodes import EpisodesRead, read_episodes
from .join import JoinedState, SkippedCheckpoint, group_batches, join_states
from .locations import AnyPath, is_local
from .rejects import Reject
from .run_files import EPISODES_FILE, SNAPSHOTS_DIR, run_file_problem
from .snapshots import Snapshot, SnapshotListing, list_snapshots, read_snapshot


@dataclass
class SnapshotsRead:
    """The parsed snapshots of a run, in version order, and what was set aside."""

    snapshots: list[Snapshot] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)


@dataclass
class RunRead:
    """Everything the core got from one run folder."""

    run: str
    episodes: EpisodesRead
    snapshots: SnapshotsRead
    states: list[JoinedState]
    skipped: list[SkippedCheckpoint]

    @property
    def rejects(self) -> list[Reject]:
        return self.episodes.rejects + self.snapshots.rejects


def run_notes(run_dir: AnyPath) -> list[str]:
    """Plain-words remarks about a run folder's shape (none for a complete, ordinary run)."""
    notes = []
    if run_dir.is_symlink():
        notes.append(f"run folder is a symlink to {run_dir.resolve()} (followed)")
    episodes = run_dir / EPISODES_FILE
    problem = run_file_problem(episodes, run_dir) if _present(episodes) else None
    if not _present(episodes):
        notes.append(f"no {EPISODES_FILE}: the run has no episodes yet")
    elif problem:
        notes.append(f"{EPISODES_FILE} is not read: {problem}")
    elif episodes.is_file() and episodes.stat().st_size == 0:
        notes.append(f"{EPISODES_FILE} is empty")
    snapshots = run_dir / SNAPSHOTS_DIR
    if not snapshots.is_dir():
        if _present(snapshots):  # a loop, a FIFO, a file: said so, not "no checkpoints yet"
            problem = run_file_problem(snapshots, run_dir) or "not a folder"
            notes.append(f"{SNAPSHOTS_DIR}/ is not read: {problem}")
        else:
            notes.append(f"no {SNAPSHOTS_DIR}/ folder: the run has no checkpoints yet")
    return notes


def _present(path: AnyPath) -> bool:
    """Whether the run has an entry at ``path`` at all (a dangling link or a loop counts)."""
    return os.path.lexists(path) if is_local(path) else path.exists()


def read_run_episodes(run_dir: AnyPath, run: str, strict: bool = False) -> EpisodesRead:
    """The run's episodes; a run without ``episodes.jsonl`` simply has none."""
    path = run_dir / EPISODES_FILE
    if not _present(path):
        return EpisodesRead()
    return read_episodes(path, f"{run}/{EPISODES_FILE}", strict=strict)


def read_run_snapshots(
    run_dir: AnyPath, run: str, strict: bool = False, listing: SnapshotListing | None = None
) -> SnapshotsRead:
    """The run's snapshots in numeric order; bad files become rejects."""
    listing = listing or list_snapshots(run_dir / SNAPSHOTS_DIR)
    result = SnapshotsRead(ignored=dict(listing.ignored))
    for snapshot_file in listing.snapshots:
        display = f"{run}/{SNAPSHOTS_DIR}/{snapshot_file.path.name}"
        read = read_snapshot(snapshot_file, display, strict=strict)
        if isinstance(read, Reject):
            result.rejects.append(read)
        else:
            result.snapshots.append(read)
    return result


def read_run(run_dir: AnyPath, dataset: str = "ovo", strict: bool = False) -> RunRead:
    """Read a run folder and join its checkpoint states (the seed's ``collect_from_run``)."""
    run = run_dir.name
    episodes = read_run_episodes(run_dir, run, strict)
    snapshots = read_run_snapshots(run_dir, run, strict)
    states, skipped = join_states(
        run, snapshots.snapshots, group_batches(episodes.episodes), dataset
    )
    return RunRead(run, episodes, snapshots, states, skipped)
