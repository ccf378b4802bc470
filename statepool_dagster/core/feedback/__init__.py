"""Feedback from trainers: graded answers per state, folded into per-state statistics.

The face: one record (``FeedbackRecord``), where feedback and its fold live, the importers
(verl dumps, ``statepool score --json``), the fold (``update_stats``), the rewards recorded
per state, and the selection a trainer asks for (``SelectionOptions``, ``Selection``).
"""

from __future__ import annotations

from ..faces import lazy_face
from .records import FeedbackRecord, decode, encode, from_breakdown, group_id, ops_match

__all__ = [
    "MANIFEST",
    "STATS_DIR",
    "STATS_TABLE",
    "Decision",
    "FeedbackRecord",
    "ImportReport",
    "Recorded",
    "RecordedRewards",
    "Selection",
    "SelectionOptions",
    "decode",
    "encode",
    "feedback_folder",
    "folded_segments",
    "from_breakdown",
    "group_id",
    "import_scores",
    "import_verl_dump",
    "ops_match",
    "recorded_rewards",
    "stats_folder",
    "unfolded_segments",
    "update_stats",
]

# On first use: where the fold lives is asked by every sync, which must not load Arrow.
__getattr__, __dir__ = lazy_face(
    __name__,
    __all__,
    {
        "folders": "MANIFEST STATS_DIR feedback_folder folded_segments stats_folder"
        " unfolded_segments",
        "importers": "ImportReport import_scores import_verl_dump",
        "recorded": "Recorded RecordedRewards recorded_rewards",
        "select": "Decision Selection SelectionOptions",
        "stats_store": "STATS_TABLE update_stats",
    },
)
