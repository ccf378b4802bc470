"""Append-only segments of JSON lines, written by many processes at once, read only when sealed."""

from .reader import Segment, iter_segment_lines, list_segments
from .writer import SegmentWriter

__all__ = ["Segment", "SegmentWriter", "iter_segment_lines", "list_segments"]
