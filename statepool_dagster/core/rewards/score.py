"""One scalar for a curator's answer, plus the parts it is made of.

- **format**: an answer with no well-formed list of ops scores ``format_error`` (-1 by
  default), below every parsed answer.
- **validity**: the share of the answer's ops that pass :func:`validate_ops`; each
  invalid op lowers it.
- **agreement** with the reference ops (:mod:`.agreement`), when the state has one (the
  last snapshot of a run has none: the part is then left out, not counted as 0).
- **outcome**: what an outcome hook returns for the next library, when one is set.

The score is the weighted mean of the parts present, in [0, 1] when the hook's value
is; with the format error the scale is ``SCORE_RANGE`` (−1 to 1, ``core/names``), which
the feedback statistics, the selection rules and the report read their bounds from.
Doing nothing is never rewarded when the reference changes something: an answer with
no valid op (``[]`` too) then scores 0, below any answer that gets part of it
right, whatever an outcome hook says; ``[]`` against an empty reference scores 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..names import SCORE_RANGE
from .agreement import agreement, predicted_card_ops
from .apply import apply_ops
from .parse import Op, Parsed
from .validate import validate_ops
from .vocabulary import Vocabulary

OutcomeHook = Callable[[dict[str, Any], Any], float]


@dataclass(frozen=True)
class Weights:
    """How much each part counts, and the score of an unparseable answer."""

    agreement: float = 1.0
    validity: float = 0.2
    outcome: float = 1.0
    format_error: float = SCORE_RANGE[0]


@dataclass
class Grade:
    """A scored answer: the scalar, its parts (``None``: not measured) and what went wrong."""

    score: float
    format: float
    validity: float | None = None
    agreement: float | None = None
    outcome: float | None = None
    ops: int = 0
    invalid_ops: int = 0
    problems: list[str] = field(default_factory=list)
    next_library: dict[str, Any] | None = None

    def breakdown(self) -> dict[str, float]:
        """Numbers only, the same keys for every answer (trainers log them as columns).

        A part that was not measured is reported as 0.0; ``has_reference`` tells the
        two zeros of ``agreement`` apart.
        """
        return {
            "score": float(self.score),
            "format": float(self.format),
            "validity": float(self.validity or 0.0),
            "agreement": float(self.agreement or 0.0),
            "has_reference": 0.0 if self.agreement is None else 1.0,
            "outcome": float(self.outcome or 0.0),
            "ops": float(self.ops),
            "invalid_ops": float(self.invalid_ops),
        }


def score_answer(
    parsed: Parsed,
    library: dict[str, Any] | None,
    reference: list[Op] | None,
    vocabulary: Vocabulary,
    max_ops: int,
    weights: Weights,
    outcome: Callable[[dict[str, Any]], float] | None = None,
) -> Grade:
    """Grade one parsed answer; ``reference`` ``None`` means the state has no reference ops.

    ``library`` ``None`` means the state is unknown: card ids are not checked. The
    budget is ``max_ops``, or the reference's own length when that is larger (the run's
    curator did it, so it cannot be wrong to).
    """
    if not parsed.ok:
        return Grade(
            score=weights.format_error,
            format=0.0,
            validity=0.0,
            agreement=None if reference is None else 0.0,
            problems=[parsed.reason],
        )
    ops = parsed.ops or []
    budget = max(max_ops, len(reference or ()))
    checked = validate_ops(ops, library, vocabulary, budget)
    grade = Grade(
        score=0.0,
        format=1.0,
        ops=checked.total,
        invalid_ops=len(checked.violations),
        problems=[v.describe() for v in checked.violations],
    )
    next_library = None if library is None else apply_ops(library, checked.valid, vocabulary)
    grade.next_library = next_library
    nothing_done = not checked.valid and bool(reference)
    if checked.total:
        grade.validity = len(checked.valid) / checked.total
    else:
        grade.validity = 0.0 if reference else 1.0
    if reference is not None:
        predicted = predicted_card_ops(library, next_library, checked.valid, vocabulary)
        grade.agreement = agreement(predicted, reference, library)
    if outcome is not None and next_library is not None and not nothing_done:
        grade.outcome = float(outcome(next_library))
    parts = [
        (weights.validity, grade.validity),
        (weights.agreement, grade.agreement),
        (weights.outcome, grade.outcome),
    ]
    counted = [(w, v) for w, v in parts if v is not None and w > 0]
    total_weight = sum(w for w, _ in counted)
    grade.score = sum(w * v for w, v in counted) / total_weight if total_weight else 0.0
    if nothing_done:
        grade.score = 0.0
    return grade
