"""Argument types that check a flag's range at the door.

argparse reports a bad value under the flag's name, with the range, and exits 2 before
the command runs, so nothing is written.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(
    kind: type[int] | type[float], low: float | None = None, high: float | None = None
) -> Callable[[str], int | float]:
    """A type for argparse: ``kind`` (int or float), finite, within [low, high]."""
    if low is not None and high is not None:
        scale = f"{low:g} to {high:g}"
    elif low is not None:
        scale = f"at least {low:g}"
    else:
        scale = f"at most {high:g}"
    what = "a whole number" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, {scale}, not {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {what}, {scale}, not {text!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {scale}, not {text}")
        return value

    parse.__name__ = kind.__name__
    parse.bounds = (low, high)  # type: ignore[attr-defined]  # the tests' property check reads it
    return parse


def finite(text: str) -> float:
    """A finite float (a band's bounds: their range depends on another flag)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


FRACTION = number(float, 0, 1)
SECONDS = number(float, 0)
STEP = number(int, 0)
POSITIVE = number(int, 1)
