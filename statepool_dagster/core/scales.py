"""The feedback scales, derived from the ranges the grader defines (``core/names``).

A score lies in ``SCORE_RANGE`` (−1 to 1), an ops-match rate in ``MATCH_RANGE`` (0 to
1). A selection band lies within its measure's range; the ``std`` weight is a mean of
group sample stds (n − 1), at most ``STD_TOP``; the ``pass-rate`` weight p(1 − p) of a
rate in ``MATCH_RANGE`` is at most ``PASS_RATE_TOP``. A state with no feedback weighs
the top of its scale: never less than a scored one. Imports nothing heavy (the command
line checks its flags with it).
"""

from __future__ import annotations

import math

from .names import MATCH_RANGE, SCORE_RANGE


def max_sample_std(low: float, high: float) -> float:
    """The largest sample std (n − 1) of values in [low, high]: two values, one at each end.

    (More values at the ends lower it towards the population std, (high − low) / 2.)
    """
    return (high - low) / 2 * math.sqrt(2)


STD_TOP = max_sample_std(*SCORE_RANGE)  # √2 ≈ 1.414 for scores in [−1, 1]
PASS_RATE_TOP = ((MATCH_RANGE[1] - MATCH_RANGE[0]) / 2) ** 2  # p(1 − p) at p = 1/2: 0.25
UNSEEN_WEIGHT = {"std": STD_TOP, "pass-rate": PASS_RATE_TOP}
BAND_RANGES = {"match": MATCH_RANGE, "score": SCORE_RANGE}
BAND_MEASURES = {"match": "mean ops-match rate", "score": "mean score"}


def band_problem(lo: float, hi: float, band_on: str) -> str | None:
    """Why [lo, hi] is no band on ``band_on``'s scale, or ``None`` when it is one."""
    low, high = BAND_RANGES[band_on]
    scale = f"the {BAND_MEASURES[band_on]}'s scale, {low:g} to {high:g} (band on {band_on})"
    if not (math.isfinite(lo) and math.isfinite(hi) and low <= lo <= high and low <= hi <= high):
        return f"outside {scale}"
    if lo > hi:
        return "LO above HI"
    return None
