"""One feedback record: what a grading call saw for one answer to one state.

A record is one JSON line of a feedback segment::

    {"state_id": "run000_ckpt1", "score": 0.6, "parts": {...}, "group": "...",
     "step": 12, "time": 1764900000.0, "ops_match": 1, "source": "trl"}

``group`` names the answers to one prompt in one step (a GRPO group); ``step`` is the
policy step where the trainer gives it (``None`` otherwise); ``ops_match`` is 1 when
the answer's ops equal the reference's (agreement 1), 0 when they do not, ``None`` when
the state has no reference ops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..ranges import FINITE, check

PART_KEYS = ("format", "validity", "agreement", "has_reference", "outcome", "ops", "invalid_ops")
MATCH_EPS = 1e-9


def ops_match(parts: Mapping[str, Any]) -> int | None:
    """1 when the answer's ops equal the reference's, 0 when not, ``None`` without reference."""
    has_reference = parts.get("has_reference")
    if not has_reference:
        return None
    agreement = parts.get("agreement")
    if not isinstance(agreement, int | float):
        return 0
    return 1 if agreement >= 1.0 - MATCH_EPS else 0


def group_id(*parts: Any) -> str:
    """A short digest naming one group (e.g. of a state id, a step and a call)."""
    text = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=10).hexdigest()


class FeedbackRecord(msgspec.Struct, omit_defaults=False):
    """One graded answer, as a feedback segment holds it."""

    state_id: str
    score: float
    group: str
    time: float
    source: str  # who recorded it: verl, trl, verl-dump or scores
    step: int | None = None
    ops_match: int | None = None
    parts: dict[str, float] = {}


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(FeedbackRecord)


def encode(record: FeedbackRecord) -> bytes:
    """The record's JSON line (without the line end)."""
    return _encoder.encode(record)


@dataclass(frozen=True)
class BadRecord:
    """A line of a feedback segment that is not a record: why."""

    error: str


def decode(line: bytes) -> FeedbackRecord | BadRecord:
    """A segment line as a record, or why it is not one (never raises)."""
    try:
        record = _decoder.decode(line)
    except (msgspec.DecodeError, RecursionError) as exc:
        return BadRecord(f"not a feedback record: {exc}")
    try:
        return checked(record)
    except ValueError as exc:
        return BadRecord(str(exc))


def checked(record: FeedbackRecord) -> FeedbackRecord:
    """``record`` if every field fits its column; else a ``ValueError`` naming the field.

    The one check of a record, wherever it enters: the recorder, an import, a segment read.
    """
    check_state_id(record.state_id)
    check_values(record.score, record.time, record.step)
    if record.ops_match is not None:
        check("ops_match", record.ops_match)
    for name, value in record.parts.items():
        check(f"parts.{name}", value, FINITE)
    return record


def check_state_id(state_id: Any) -> None:
    """A record's state id: text UTF-8 can hold (no lone surrogate), not empty."""
    if not isinstance(state_id, str) or not state_id:
        raise ValueError(f"state_id: must be a non-empty string, not {state_id!r}")
    try:
        state_id.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("state_id: not storable as UTF-8 (a lone surrogate)") from None


def check_values(score: Any, time: Any, step: Any) -> None:
    """A graded answer's numbers (score, time, policy step) checked against their columns."""
    check("score", score)
    check("time", time)
    if step is not None:
        check("step", step)


def from_breakdown(
    state_id: str,
    breakdown: Mapping[str, Any],
    *,
    group: str,
    time: float,
    source: str,
    step: int | None = None,
) -> FeedbackRecord:
    """A record from a grade's breakdown (``Grade.breakdown()`` or a scores row)."""
    score = breakdown["score"]
    check_state_id(state_id)
    check_values(score, time, step)
    parts = {k: float(v) for k in PART_KEYS if finite_number(v := breakdown.get(k))}
    return FeedbackRecord(
        state_id=state_id,
        score=float(score),
        group=group,
        time=float(time),
        source=source,
        step=step,
        ops_match=ops_match(breakdown),
        parts=parts,
    )


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or float a float column holds (not a bool, NaN, 10**400)."""
    return FINITE.problem(value) is None
