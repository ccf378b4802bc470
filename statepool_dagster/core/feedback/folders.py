"""Where feedback lives: its segments' folder, and the fold's folder and manifest in the store.

Read without Arrow: the sensors, ``statepool sync`` and ``statepool status`` ask it often.
"""

from __future__ import annotations

import json
import os

from ..config import Settings
from ..locations import AnyPath, as_path, read_fresh

FEEDBACK_SUBDIR = "feedback"
STATS_DIR = "feedback_stats"
MANIFEST = "fold.json"


def feedback_folder(settings: Settings) -> str:
    """Where feedback segments live: ``feedback_dir``, else ``<store>/feedback``."""
    if settings.feedback_dir:
        return settings.feedback_dir
    return settings.store_dir.rstrip("/") + "/" + FEEDBACK_SUBDIR


def stats_folder(store: str | os.PathLike[str]) -> AnyPath:
    """``<store>/feedback_stats``: the fold's table and manifest."""
    return as_path(store) / STATS_DIR


def folded_segments(store: str | os.PathLike[str]) -> set[str]:
    """The feedback segments the saved fold has read (none when there is no fold yet)."""
    try:
        data = read_fresh(stats_folder(store) / MANIFEST)
    except FileNotFoundError:
        return set()
    return set(json.loads(data).get("folded", ()))


def unfolded_segments(settings: Settings) -> list[str]:
    """The sealed feedback segments the saved fold has not read: the feedback sensor asks for a
    fold when there are any."""
    from ..segments.reader import list_segments

    folded = folded_segments(settings.store_dir)
    return [s.name for s in list_segments(feedback_folder(settings)) if s.name not in folded]
