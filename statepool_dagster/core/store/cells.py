"""A record's value as a flat column's cell: empty where the column cannot hold it.

The record itself is always kept whole (its JSON column), so nothing is lost.
"""

from __future__ import annotations

from typing import Any

from ..runs.json_read import INT64_MAX, INT64_MIN


def text_cell(value: Any) -> str | None:
    return None if value is None else str(value)


def float_cell(value: Any) -> float | None:
    """A float column's cell; an integer too large for a float leaves it empty."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def int64_cell(value: Any) -> int | None:
    """An int64 column's cell: an integer in range, else empty."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def flag_cell(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
