"""Feedback from trainers: graded answers per state, folded into per-state statistics."""

from .records import FeedbackRecord, decode, encode, from_breakdown, group_id, ops_match

__all__ = ["FeedbackRecord", "decode", "encode", "from_breakdown", "group_id", "ops_match"]
