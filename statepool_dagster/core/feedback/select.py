"""Which states to serve, decided from ``state_stats``: pure functions, each rule off by default.

- ``drop_zero_variance=K``: leave out a state whose last K groups all had zero reward
  spread (GRPO learns nothing from them: DAPO's ``filter_groups``, TRL #3708, verl #2988).
- ``difficulty_band=(LO, HI)``: keep a state whose mean ops-match rate (``band_on=
  "match"``) or mean score (``"score"``) lies in [LO, HI] (verl #2791); filtering on the
  raw task metric rather than the shaped reward, as NeMo-RL #2431 advises.
- ``weight="std"``: a weight, the mean spread of the state's last groups (verl #7894);
  ``"pass-rate"``: p(1 - p) of its ops-match rate.

A state with no feedback yet (or no measurement a rule needs) is kept: nothing says it
no longer teaches. Its weight is ``unseen_weight``, by default the top of the weight's
scale (``scales``: √2 for ``std``, 0.25 for ``pass-rate``), so never below a scored state.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import pyarrow as pa

from ..names import LAST_STDS
from ..scales import UNSEEN_WEIGHT, band_problem
from .stats import ZERO_STD
from .stats_store import read_stats

Weight = Literal["std", "pass-rate"]
BandOn = Literal["match", "score"]
Row = TypeVar("Row")


@dataclass(frozen=True)
class SelectionOptions:
    """The selection rules; every one ``None`` means everything is served unweighted."""

    drop_zero_variance: int | None = None
    difficulty_band: tuple[float, float] | None = None
    band_on: BandOn = "match"
    weight: Weight | None = None
    unseen_weight: float | None = None

    def __post_init__(self) -> None:
        k = self.drop_zero_variance
        if k is not None and not 1 <= k <= LAST_STDS:
            raise ValueError(f"--drop-zero-variance {k}: must be 1 to {LAST_STDS}")
        if self.band_on not in ("match", "score"):
            raise ValueError(f"band on {self.band_on!r}: match or score")
        if self.difficulty_band is not None:
            lo, hi = self.difficulty_band
            problem = band_problem(lo, hi, self.band_on)
            if problem:
                raise ValueError(f"--difficulty-band {lo:g} {hi:g}: {problem}")
        if self.weight not in (None, "std", "pass-rate"):
            raise ValueError(f"--weight {self.weight!r}: std or pass-rate")

    @property
    def active(self) -> bool:
        return bool(self.drop_zero_variance or self.difficulty_band or self.weight)

    @staticmethod
    def from_args(
        args: argparse.Namespace, defaults: SelectionOptions | None = None
    ) -> SelectionOptions:
        """From the arguments ``cli.selection_flags.add_selection_arguments`` added; a flag
        not given keeps its value in ``defaults`` (for ``statepool export``: the environment's)."""
        base = defaults or SelectionOptions()
        band = getattr(args, "difficulty_band", None)
        given = {
            "drop_zero_variance": getattr(args, "drop_zero_variance", None),
            "difficulty_band": tuple(band) if band else None,
            "band_on": getattr(args, "band_on", None),
            "weight": getattr(args, "weight", None),
        }
        return replace(base, **{k: v for k, v in given.items() if v is not None})

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> SelectionOptions:
        """From ``STATEPOOL_SELECT_{DROP_ZERO_VARIANCE,DIFFICULTY_BAND,BAND_ON,WEIGHT}``."""
        from ..config import Settings

        return SelectionOptions.from_settings(Settings.from_env(environ))

    @staticmethod
    def from_settings(settings: Any) -> SelectionOptions:
        """From a :class:`~statepool_dagster.core.config.Settings`' ``select_*`` fields."""
        band = settings.select_difficulty_band
        lo_hi = tuple(float(x) for x in band.replace(",", " ").split()) if band else None
        if lo_hi is not None and len(lo_hi) != 2:
            raise ValueError(f"STATEPOOL_SELECT_DIFFICULTY_BAND={band!r}: two numbers, LO,HI")
        return SelectionOptions(
            drop_zero_variance=settings.select_drop_zero_variance,
            difficulty_band=lo_hi,  # type: ignore[arg-type]
            band_on=settings.select_band_on,
            weight=settings.select_weight,
        )


@dataclass(frozen=True)
class Decision:
    """Whether a state is served, its weight (``None`` unweighted) and why it is left out."""

    keep: bool
    weight: float | None = None
    reason: str | None = None


_STAT_COLUMNS = ("state_id", "last_stds", "ops_match_rate", "score_mean")


@dataclass
class Selection:
    """The rules and the stats they read: ``decide(state_id)`` per row or batch."""

    options: SelectionOptions
    stats: dict[str, tuple[list[float], float | None, float]] = field(default_factory=dict)

    @staticmethod
    def from_table(options: SelectionOptions, table: pa.Table) -> Selection:
        cols = table.select(list(_STAT_COLUMNS)).to_pydict()
        rows = zip(*(cols[c] for c in _STAT_COLUMNS), strict=True)
        return Selection(options, {sid: (stds or [], m, s) for sid, stds, m, s in rows})

    @staticmethod
    def from_options(options: SelectionOptions, store: str | os.PathLike[str]) -> Selection:
        """The rules with the store's last ``state_stats`` (none read when no rule is on)."""
        if not options.active:
            return Selection(options)
        return Selection.from_table(options, read_stats(store))

    def notice(self) -> str | None:
        """What to tell when a rule is on but no state has statistics yet: it keeps them all."""
        if not self.options.active or self.stats:
            return None
        rules = " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in describe(self.options).items()
            if v is not None and k != "band_on"
        )
        return (
            f"selection ({rules}): no feedback statistics yet (state_stats holds no state), so "
            "every state is kept"
            + (" at the unscored weight" if self.options.weight else "")
            + "; record feedback, then fold it (statepool feedback --fold)"
        )

    def decide(self, state_id: str) -> Decision:
        o = self.options
        seen = self.stats.get(state_id)
        if seen is None:
            return Decision(True, self._unseen())
        stds, match, score = seen
        k = o.drop_zero_variance
        if k and len(stds) >= k and all(s <= ZERO_STD for s in stds[-k:]):
            return Decision(
                False,
                reason=f"its last {'group' if k == 1 else f'{k} groups all'} had zero reward std "
                f"(--drop-zero-variance {k})",
            )
        if o.difficulty_band is not None:
            lo, hi = o.difficulty_band
            value, what = (match, "ops-match rate") if o.band_on == "match" else (score, "score")
            if value is not None and not lo <= value <= hi:
                return Decision(
                    False,
                    reason=f"mean {what} {value:.3f} outside --difficulty-band {lo:g} {hi:g}",
                )
        return Decision(True, self._weight(stds, match))

    def _weight(self, stds: list[float], match: float | None) -> float | None:
        o = self.options
        if o.weight == "std" and stds:
            return min(sum(stds) / len(stds), UNSEEN_WEIGHT["std"])  # a hook's score off scale
        if o.weight == "pass-rate" and match is not None:
            return match * (1 - match)
        return self._unseen()

    def _unseen(self) -> float | None:
        o = self.options
        if o.weight is None:
            return None
        return o.unseen_weight if o.unseen_weight is not None else UNSEEN_WEIGHT[o.weight]

    def apply(
        self, rows: Iterable[Row], state_id: Callable[[Row], str], problems: list[str]
    ) -> Iterator[tuple[Row, float | None]]:
        """``(row, weight)`` for each row kept; each row left out named in ``problems``."""
        for row in rows:
            sid = state_id(row)
            decision = self.decide(sid)
            if decision.keep:
                yield row, decision.weight
            else:
                problems.append(f"state {sid} left out: {decision.reason}")


def describe(options: SelectionOptions) -> dict[str, Any]:
    """The options as an export's summary reports them."""
    return {
        "drop_zero_variance": options.drop_zero_variance,
        "difficulty_band": list(options.difficulty_band) if options.difficulty_band else None,
        "band_on": options.band_on,
        "weight": options.weight,
    }
