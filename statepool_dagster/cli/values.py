"""The command line's parser and argument types that check a flag's range at the door.

A bad value is reported in one line under the flag's name, with the range, and the
command exits 2 before it runs, so nothing is written.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

# What ``statepool --help`` says: plain text (the main module's docstring is reST).
DESCRIPTION = (
    "The state pool's command line: sync runs and sessions into the store, export it for "
    "a trainer, grade answers, record feedback. Each command's --help tells more."
)


class Parser(argparse.ArgumentParser):
    """argparse, but a bad value is one line naming its flag, as every refusal here is."""

    def error(self, message: str) -> NoReturn:
        flag, sep, why = message.removeprefix("argument ").partition(": ")
        if message.startswith("argument ") and sep:
            self.exit(2, f"statepool: {flag.split('/')[-1]}: {why}\n")
        super().error(message)


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
