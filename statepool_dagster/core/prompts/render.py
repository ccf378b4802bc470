"""Render the curator prompt for a state exactly as the inference side does."""

from __future__ import annotations

import json

from ..errors import PromptInputError
from ..states.models import CheckpointState
from .formatting import format_episodes
from .spec import PromptSpec, default_prompt_spec

ANALYSIS_KEYS = ("failure_patterns", "observations", "summary")
EMPTY_CATALOG = "(empty library)"


def card_problem(card: object) -> str | None:
    """Why ``card`` cannot be rendered (``None``: it can): what the original would crash on.

    ``trigger`` and ``program`` must be strings (the original would print a list's repr:
    not something a curator should read), ``card_id`` present, ``meta_info`` an object.
    """
    if not isinstance(card, dict):
        return f"not an object (got {type(card).__name__})"
    if "card_id" not in card:
        return "card_id is missing"
    for name in ("trigger", "program"):
        if name not in card:
            return f"{name} is missing"
        if not isinstance(card[name], str):
            return f"{name} is not a string (got {type(card[name]).__name__})"
    if not isinstance(card.get("meta_info", {}), dict):
        return f"meta_info is not an object (got {type(card['meta_info']).__name__})"
    return None


def render_catalog(cards: list[dict], spec: PromptSpec) -> str:
    """One entry per card: counters, then the cut trigger and program.

    A card that cannot be rendered raises :class:`PromptInputError` naming it.
    """
    limits = spec.limits
    lines = []
    for i, card in enumerate(cards):
        problem = card_problem(card)
        if problem:
            name = f"card {i}" + (f" ({card['card_id']!r})" if "card_id" in card else "")
            raise PromptInputError(f"cannot render the prompt: {name}: {problem}")
        m = card.get("meta_info", {})
        lines.append(
            f"- [{card['card_id']}] inj={m.get('injected', 0)} fired={m.get('fired', 0)} "
            f"helped={m.get('helped', 0)} harmful={m.get('harmful', 0)}\n"
            f"  When: {card['trigger'][: limits.trigger_chars]}\n"
            f"  Do: {card['program'][: limits.program_chars]}"
        )
    return "\n".join(lines) or EMPTY_CATALOG


def render_tool_specs(spec: PromptSpec) -> str:
    return "\n".join(f"- {name}: {tool['description']}" for name, tool in spec.tool_specs.items())


def render_analysis_block(state: CheckpointState, spec: PromptSpec) -> str:
    """The Reflector's analysis when there is one, else the raw batch."""
    if state.analysis is not None:
        shown = {k: state.analysis.get(k) for k in ANALYSIS_KEYS}
        return json.dumps(shown, ensure_ascii=False, indent=1)[: spec.limits.analysis_chars]
    limit = spec.limits.episodes_chars
    if spec.episode_formatter is format_episodes:  # the bundled one builds only what is kept
        return "## Raw episodes\n" + format_episodes(state.episodes, limit)
    formatted = spec.episode_formatter(state.episodes)
    return "## Raw episodes\n" + formatted[:limit]


def build_curator_prompt(state: CheckpointState, spec: PromptSpec | None = None) -> str:
    """The curator's input for ``state``: byte-identical to the original under the same spec.

    :class:`PromptInputError` when a card cannot be rendered (the state stays valid).
    """
    spec = spec or default_prompt_spec()
    cards = state.lib_snapshot.get("cards", [])
    if isinstance(cards, dict | str) and not cards:
        cards = []  # the original iterates an empty {} or "" as no card: "(empty library)"
    if not isinstance(cards, list):
        raise PromptInputError(f"cannot render the prompt: cards is a {type(cards).__name__}")
    return spec.template.format(
        tool_specs=render_tool_specs(spec),
        version=state.lib_snapshot.get("version", 0),
        n_cards=len(cards),
        skill_catalog=render_catalog(cards, spec),
        last_receipt=state.last_receipt,
        analysis_block=render_analysis_block(state, spec),
        max_ops=spec.limits.max_ops,
        param_rule=spec.param_rule,
    )
