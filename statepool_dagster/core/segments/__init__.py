"""Append-only segments of JSON lines, written by many processes at once, read only when sealed.

The face: sealed segments listed and read line by line (``list_segments``,
``iter_segment_lines``, ``open_segment``), a segment's name parsed, and the writer.
"""

from __future__ import annotations

from ..faces import lazy_face
from .naming import parse_segment_name
from .reader import (
    DEFAULT_MAX_LINE,
    OversizeLine,
    Segment,
    iter_segment_lines,
    iter_segment_records,
    list_segments,
    open_segment,
    read_segment_line,
)

__all__ = [
    "DEFAULT_MAX_LINE",
    "OversizeLine",
    "Segment",
    "SegmentWriter",
    "iter_segment_lines",
    "iter_segment_records",
    "list_segments",
    "open_segment",
    "parse_segment_name",
    "read_segment_line",
]

# On first use: listing segments (``statepool status``) must not load the writer's Arrow.
__getattr__, __dir__ = lazy_face(__name__, __all__, {"writer": "SegmentWriter"})
