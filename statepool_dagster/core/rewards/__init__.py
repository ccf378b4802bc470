"""Curator answers parsed, checked, applied to the state's library and scored (no Dagster)."""

from __future__ import annotations

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
    "validate_ops",
]
