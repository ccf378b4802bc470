"""Where feedback lives: the segments' folder and the fold's folder and manifest in the store."""

from __future__ import annotations

from ..config import Settings

FEEDBACK_SUBDIR = "feedback"
STATS_DIR = "feedback_stats"
MANIFEST = "fold.json"


def feedback_folder(settings: Settings) -> str:
    """Where feedback segments live: ``feedback_dir``, else ``<store>/feedback``."""
    if settings.feedback_dir:
        return settings.feedback_dir
    return settings.store_dir.rstrip("/") + "/" + FEEDBACK_SUBDIR
