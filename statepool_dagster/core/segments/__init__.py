"""Append-only segments of JSON lines, written by many processes at once, read only when sealed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .reader import Segment, iter_segment_lines, list_segments

if TYPE_CHECKING:
    from .writer import SegmentWriter

__all__ = ["Segment", "SegmentWriter", "iter_segment_lines", "list_segments"]


def __getattr__(name: str) -> Any:
    # On first use: listing segments (``statepool status``) must not load the writer's Arrow.
    if name == "SegmentWriter":
        from .writer import SegmentWriter

        return SegmentWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
