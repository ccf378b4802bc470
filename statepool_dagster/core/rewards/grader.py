"""The reward as configured: vocabulary, budget, parser, outcome hook and weights.

Everything comes from :class:`Settings` (``STATEPOOL_TOOL_SPECS``, ``STATEPOOL_MAX_OPS``,
``STATEPOOL_OPS_PARSER``, ``STATEPOOL_OUTCOME_SCORER``, ``STATEPOOL_REWARD_*``), read when
a grader is made; :func:`grader_from_env` keeps one per distinct configuration, so a
trainer's reward worker loads the specs and hooks once.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..config import Settings, settings_key
from ..errors import StatepoolError, UserCodeError, call_user
from ..prompts.spec import load_tool_specs
from ..states.models import CheckpointState
from .parse import Op, OpsParser, parse_ops, run_parser
from .score import Grade, OutcomeHook, Weights, score_answer
from .vocabulary import Vocabulary


def load_callable(ref: str, what: str) -> Callable[..., Any]:
    """The function ``module:function`` names."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise StatepoolError(f"{what}: {ref!r} is not module:function")
    try:
        func: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            func = getattr(func, part)
    except (ImportError, AttributeError) as exc:
        raise StatepoolError(f"{what}: cannot load {ref!r}: {exc}") from None
    if not callable(func):
        raise StatepoolError(f"{what}: {ref!r} is not callable")
    return func


def completion_text(completion: Any) -> str:
    """The answer's text: a string as is; of a message list, the assistant's last turn.

    Structured tool calls on a message are written out as JSON for the parser to read.
    """
    if isinstance(completion, str):
        return completion
    messages = completion if isinstance(completion, list) else [completion]
    messages = [m for m in messages if isinstance(m, Mapping)]
    replies = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
    if not replies:
        return ""
    last = replies[-1]
    content = last.get("content")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    text = content if isinstance(content, str) else ""
    if last.get("tool_calls"):
        text += "\n" + json.dumps({"tool_calls": last["tool_calls"]}, ensure_ascii=False)
    return text


def reference_from_json(text: Any) -> list[Op] | None:
    """The ops of a ``reference_ops`` column; ``None`` when the state has no reference."""
    try:
        value = json.loads(text) if isinstance(text, str | bytes) else text
    except json.JSONDecodeError:
        return None
    if isinstance(value, list):
        return value
    if not isinstance(value, Mapping) or value.get("next_version") is None:
        return None
    ops = value.get("ops")
    return ops if isinstance(ops, list) else None


@lru_cache(maxsize=64)  # a GRPO group's answers share one state text
def _state_from_text(text: str | bytes) -> CheckpointState | None:
    try:
        return CheckpointState.from_json(text)
    except (ValueError, TypeError):
        return None


def state_from_json(value: Any) -> CheckpointState | None:
    """A state column's value as a state, or ``None`` when there is none to read."""
    if isinstance(value, CheckpointState):
        return value
    if isinstance(value, str | bytes) and value:
        return _state_from_text(value)
    if isinstance(value, Mapping):
        try:
            return CheckpointState(**value)
        except (ValueError, TypeError):
            return None
    return None


@dataclass(frozen=True)
class Grader:
    """Scores curator answers for states."""

    vocabulary: Vocabulary
    max_ops: int
    weights: Weights
    parser: OpsParser = parse_ops
    outcome_hook: OutcomeHook | None = None
    outcome_name: str = ""

    @staticmethod
    def from_settings(settings: Settings) -> Grader:
        hook = settings.outcome_scorer
        return Grader(
            vocabulary=Vocabulary.from_tool_specs(load_tool_specs(settings.tool_specs)),
            max_ops=settings.max_ops,
            weights=Weights(
                agreement=settings.reward_agreement_weight,
                validity=settings.reward_validity_weight,
                outcome=settings.reward_outcome_weight,
                format_error=settings.reward_format_error,
            ),
            parser=load_callable(settings.ops_parser, "ops parser")
            if settings.ops_parser
            else parse_ops,
            outcome_hook=load_callable(hook, "outcome scorer") if hook else None,
            outcome_name=hook or "",
        )

    def grade(
        self, completion: Any, state: CheckpointState | None, reference: list[Op] | None
    ) -> Grade:
        """Grade one answer; never raises on the answer (an outcome hook may raise)."""
        parsed = run_parser(self.parser, completion_text(completion))
        library = state.lib_snapshot if state is not None else None
        outcome = None
        if self.outcome_hook is not None and state is not None:
            hook = self.outcome_hook

            def outcome(next_library: dict[str, Any]) -> float:
                where = f"outcome scorer {self.outcome_name} on state {state.state_id}"
                try:
                    value = call_user(lambda: float(hook(next_library, state)))
                except UserCodeError as error:
                    raise StatepoolError(f"{where} failed: {error}") from error.raised
                if not math.isfinite(value):
                    raise StatepoolError(f"{where} returned {value}, not a finite number")
                return value

        return score_answer(
            parsed, library, reference, self.vocabulary, self.max_ops, self.weights, outcome
        )


@lru_cache(maxsize=8)
def _cached(environ: tuple[tuple[str, str], ...]) -> Grader:
    return Grader.from_settings(Settings.from_env(dict(environ)))


def grader_from_env() -> Grader:
    """The grader the environment configures (one per distinct ``STATEPOOL_*`` set)."""
    return _cached(settings_key())
