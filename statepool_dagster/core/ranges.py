"""What each stored number may be: the range of the column that holds it.

Every door a value enters by — the command line's flags, ``StateWriter``, the feedback
recorder, every reader of a session or feedback line — calls :func:`check`, so a value its
column cannot hold (a policy step of ``10**30`` in an int64 column, a negative step, a
time ``float`` cannot hold) is refused there, naming the field, before anything is written.
Imports nothing heavy: the command line checks its flags with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Range:
    """A number's kind (``int`` or ``float``) and bounds; a float is always finite."""

    kind: type[int] | type[float]
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        what = "a whole number" if self.kind is int else "a number"
        low, high = (_text(b) for b in (self.low, self.high))
        if self.low is not None and self.high is not None:
            return f"{what}, {low} to {high}"
        if self.low is not None:
            return f"{what}, at least {low}"
        if self.high is not None:
            return f"{what}, at most {high}"
        return f"a finite {what.removeprefix('a ')}"

    def scale(self) -> str:
        """The bounds alone (``0 to 1``), as a flag's refusal says them."""
        return self.describe().partition(", ")[2] or self.describe()

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is outside this range (``None``: inside)."""
        if self.kind is int:
            if type(value) is not int:
                return f"must be {self.describe()}, not {_shown(value)}"
        elif isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be {self.describe()}, not {_shown(value)}"
        elif isinstance(value, int):
            try:
                value = float(value)
            except OverflowError:
                return f"must be {self.describe()}, not {_shown(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be {self.describe()}, not {_shown(value)}"
        if self.low is not None and value < self.low:
            return f"must be {self._below()}, not {_shown(value)}"
        if self.high is not None and value > self.high:
            return f"must be {self._above()}, not {_shown(value)}"
        return None

    def _below(self) -> str:
        if self.high is None or self.high == INT64_MAX:  # no top but the column's
            return f"at least {_text(self.low)}"
        return self.scale()

    def _above(self) -> str:
        if self.high == INT64_MAX:
            return f"at most {_text(self.high)} (what an int64 column holds)"
        return self.scale()


def _text(bound: float | None) -> str:
    if bound is None:
        return ""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


# What an int64 column holds where a negative number means nothing (a step, a count).
COUNT = Range(int, 0, INT64_MAX)
FINITE = Range(float)  # a float64 column: NaN and infinities mean nothing in any of ours

# The stored fields, by the name a user knows them by (a keyword, a JSON key, a column).
# The command line's numeric flags build their ranges with cli/values.number.
FIELDS: dict[str, Range] = {
    "policy_step": COUNT,
    "step": COUNT,  # a feedback record's policy step
    "time": FINITE,
    "score": FINITE,
    "ops_match": Range(int, 0, 1),
}


def check(field: str, value: Any, rule: Range | None = None) -> Any:
    """``value`` if it lies in ``rule`` (by default ``FIELDS[field]``); else a ``ValueError``
    that starts with the field's name."""
    rule = rule or FIELDS[field]
    problem = rule.problem(value)
    if problem:
        raise ValueError(f"{field}: {problem}")
    return value
