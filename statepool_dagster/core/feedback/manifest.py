"""Where ``state_stats`` keeps its fold, and which feedback segments it has folded (read
without Arrow: the sensors and ``statepool sync`` ask it on every tick)."""

from __future__ import annotations

import json
import os

from ..locations import AnyPath, as_path

STATS_DIR = "feedback_stats"
MANIFEST = "fold.json"


def stats_folder(store: str | os.PathLike[str]) -> AnyPath:
    return as_path(store) / STATS_DIR


def folded_segments(store: str | os.PathLike[str]) -> set[str]:
    """The feedback segments the saved fold has read (none when there is no fold yet)."""
    path = stats_folder(store) / MANIFEST
    if not path.exists():
        return set()
    return set(json.loads(path.read_bytes()).get("folded", ()))
