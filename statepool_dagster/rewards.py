"""Reward functions for trainers, named so their configs can point at them.

- verl: ``compute_score`` (``reward.custom_reward_function.path=pkg://statepool_dagster.rewards``,
  ``name=compute_score``) returns ``{"score": ..., **breakdown}``.
- TRL: ``trl_reward`` for ``GRPOTrainer(reward_funcs=...)``, and the breakdown's parts
  (``format_reward``, ``validity_reward``, ``agreement_reward``, ``outcome_reward``) as
  separate reward functions to weight with ``reward_weights``.

Trainers import this module in their reward workers: it imports no Dagster, and its
imports are absolute so it also loads from its file path. Settings (tool specs, op
budget, parser, outcome hook, weights) come from ``STATEPOOL_*`` variables.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from statepool_dagster.core.feedback.grading import record_batch, record_one
from statepool_dagster.core.rewards.grader import (
    completion_text,
    grader_from_env,
    reference_from_json,
    settings_key,
    state_from_json,
)
from statepool_dagster.core.rewards.score import Grade

__all__ = [
    "agreement_reward",
    "compute_score",
    "format_reward",
    "outcome_reward",
    "trl_reward",
    "validity_reward",
]


BATCHES_KEPT = 4  # TRL calls each part's function on the same batch: grade it once
_recent: OrderedDict[tuple[Any, ...], list[Grade]] = OrderedDict()
_recent_lock = threading.Lock()


def _grade(text: str, state: str | None, reference: str | None) -> Grade:
    return grader_from_env().grade(text, state_from_json(state), reference_from_json(reference))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float | str]:
    """verl's custom reward: the score of one answer and its parts.

    The state and the full reference ops come from the export's ``extra_info``; without
    them ``ground_truth`` (the reference ops as a JSON list) is the reference and card
    ids go unchecked. ``extra_info``'s ``state_id`` comes back under ``state_id`` (so it
    reaches verl's rollout dumps), and the answer is recorded as feedback when
    ``STATEPOOL_FEEDBACK_DIR`` is set.
    """
    extra = extra_info if isinstance(extra_info, dict) else {}
    reference = extra.get("reference_ops")
    if reference is None:
        reference = ground_truth
    grade = _grade(completion_text(solution_str), _text(extra.get("state")), _text(reference))
    result: dict[str, float | str] = dict(grade.breakdown())
    state_id = extra.get("state_id")
    if isinstance(state_id, str):
        result["state_id"] = state_id
        record_one(state_id, result)
    return result


def _digest(text: str | None) -> bytes | None:
    return None if text is None else hashlib.blake2b(text.encode("utf-8", "replace")).digest()


def _grades(completions: Sequence[Any], kwargs: dict[str, Any]) -> list[Grade]:
    states = kwargs.get("state") or [None] * len(completions)
    references = kwargs.get("reference_ops") or kwargs.get("ground_truth")
    references = references or [None] * len(completions)
    rows = [
        (completion_text(c), _text(s), _text(r))
        for c, s, r in zip(completions, states, references, strict=True)
    ]
    # keyed by digests: a batch's state texts are not kept alive by the cache
    key = (settings_key(), *((t, _digest(s), _digest(r)) for t, s, r in rows))
    with _recent_lock:
        if key in _recent:
            _recent.move_to_end(key)
            return _recent[key]
    grades = [_grade(*row) for row in rows]
    with _recent_lock:
        _recent[key] = grades
        while len(_recent) > BATCHES_KEPT:
            _recent.popitem(last=False)
    return grades


LOGGED_PARTS = ("format", "validity", "agreement", "outcome")


def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL's reward function: one score per completion, from the export's columns.

    Where TRL offers ``log_metric``, the batch's mean of each part is logged as
    ``statepool/<part>`` (parts not measured in the batch are not logged).
    """
    grades = _grades(completions, kwargs)
    record_batch(kwargs.get("state_id"), grades, kwargs.get("trainer_state"))
    log_metric = kwargs.get("log_metric")
    if callable(log_metric):
        for part in LOGGED_PARTS:
            values = [v for g in grades if (v := getattr(g, part)) is not None]
            if values:
                log_metric(f"statepool/{part}", sum(values) / len(values))
    return [g.score for g in grades]


def format_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """0 for a parsed answer, ``STATEPOOL_REWARD_FORMAT_ERROR`` (-1) for one with no ops list."""
    grader = grader_from_env()
    return [0.0 if g.format else grader.weights.format_error for g in _grades(completions, kwargs)]


def validity_reward(
    prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
) -> list[float]:
    """The share of valid ops (0 for doing nothing when the reference changes something)."""
    return [g.validity or 0.0 for g in _grades(completions, kwargs)]


def agreement_reward(
    prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
) -> list[float | None]:
    """Agreement with the reference ops; ``None`` (ignored by TRL) where there is none."""
    return [g.agreement for g in _grades(completions, kwargs)]


def outcome_reward(
    prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
) -> list[float | None]:
    """The outcome hook's value; ``None`` (ignored by TRL) without a hook."""
    return [g.outcome for g in _grades(completions, kwargs)]
