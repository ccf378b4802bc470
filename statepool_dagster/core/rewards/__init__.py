"""Curator answers parsed, checked, applied to the state's library and scored (no Dagster).

The face: the grader as configured and its parts (parse, validate, apply, score), and the
offline grading of a completions file with its text report (``statepool score``).
"""

from __future__ import annotations

from ..faces import lazy_face
from .apply import apply_ops
from .grader import Grader, grader_from_env
from .parse import Parsed, parse_ops
from .score import Grade, Weights, score_answer
from .validate import validate_ops
from .vocabulary import Vocabulary

__all__ = [
    "Grade",
    "Grader",
    "Parsed",
    "Vocabulary",
    "Weights",
    "apply_ops",
    "grader_from_env",
    "parse_ops",
    "score_answer",
    "score_completions",
    "score_table",
    "store_states",
    "validate_ops",
]

# On first use: grading a completions file reads the store's tables with Arrow.
__getattr__, __dir__ = lazy_face(
    __name__, __all__, {"completions": "score_completions store_states", "report": "score_table"}
)
