"""The selection rules' command-line flags (``statepool export``), without what applies them.

Kept apart from ``core/feedback/select.py``: building the parser must not load Arrow for
every command.
"""

from __future__ import annotations

import argparse

from ..core.names import LAST_STDS
from .values import finite, number


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """``--drop-zero-variance K``, ``--difficulty-band LO HI``, ``--band-on``, ``--weight``."""
    parser.add_argument(
        "--drop-zero-variance", type=number(int, 1, LAST_STDS), default=None, metavar="K",
        help=f"leave out states whose last K groups all had zero reward std (K: 1 to {LAST_STDS})",
    )  # fmt: skip
    parser.add_argument(
        "--difficulty-band", type=finite, nargs=2, default=None, metavar=("LO", "HI"),
        help="keep states whose mean ops-match rate (0 to 1) or, with --band-on score, mean "
        "score (-1 to 1) is in [LO, HI]",
    )  # fmt: skip
    parser.add_argument(
        "--band-on", choices=("match", "score"), default=None,
        help="what --difficulty-band bounds: the mean ops-match rate (default) or mean score",
    )  # fmt: skip
    parser.add_argument(
        "--weight", choices=("std", "pass-rate"), default=None,
        help="a weight column: the recent groups' reward std, or p(1-p) of the match rate",
    )  # fmt: skip
