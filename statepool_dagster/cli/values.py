"""The command line's parser and argument types that check a flag's range at the door.

A bad value is reported in one line under the flag's name, with the range, and the
command exits 2 before it runs, so nothing is written.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

from ..core import INT64_MAX, Range

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
            self.exit(2, f"{self.prog}: {flag.split('/')[-1]}: {why}\n")
        super().error(message)


def number(
    kind: type[int] | type[float], low: float | None = None, high: float | None = None
) -> Callable[[str], int | float]:
    """A type for argparse: ``kind`` (int or float) within [low, high], checked by the core's
    one range check (a whole number with no top: at most what an int64 column holds)."""
    if kind is int and high is None:
        high = INT64_MAX
    rule = Range(kind, low, high)

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule.describe()}, not {text!r}") from None
        problem = rule.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
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
