"""Render the curator prompt for a state exactly as the inference side does."""

from __future__ import annotations

import json

from ..errors import PromptInputError, UserCodeError, call_user
from ..states.models import CheckpointState
from .spec import PromptSpec, default_prompt_spec
from .template import (
    RENDER_ERRORS,
    accessor_fields,
    field_error,
    format_episodes,
    nested_fields,
    nested_width_error,
    render_error,
    tool_specs_text,
)

ANALYSIS_KEYS = ("failure_patterns", "observations", "summary")
EMPTY_CATALOG = "(empty library)"
_NO_META: dict = {}


def card_problem(card: object) -> str | None:
    """Why ``card`` cannot be rendered (``None``: it can): what the original would crash on.

    ``trigger`` and ``program`` must be what the original can cut: a string, or a list
    (it cuts the list and prints it), ``card_id`` present, ``meta_info`` an object.
    """
    if not isinstance(card, dict):
        return f"not an object (got {type(card).__name__})"
    if "card_id" not in card:
        return "card_id is missing"
    for name in ("trigger", "program"):
        if name not in card:
            return f"{name} is missing"
        if not isinstance(card[name], str | list):
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
        get = card.get if type(card) is dict else None
        plain = (  # the usual card, told in a few lookups; any other is looked at closely
            get is not None
            and "card_id" in card
            and type(get("trigger")) is str
            and type(get("program")) is str
            and type(get("meta_info", _NO_META)) is dict
        )
        problem = None if plain else card_problem(card)
        if problem:
            known = isinstance(card, dict) and "card_id" in card
            name = f"card {i}" + (f" ({card['card_id']!r})" if known else "")
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
    return tool_specs_text(spec.tool_specs)


def render_analysis_block(state: CheckpointState, spec: PromptSpec) -> str:
    """The Reflector's analysis when there is one, else the raw batch."""
    if state.analysis is not None:
        if not isinstance(state.analysis, dict):
            kind = type(state.analysis).__name__
            raise PromptInputError(f"cannot render the prompt: analysis is a {kind}, not an object")
        shown = {k: state.analysis.get(k) for k in ANALYSIS_KEYS}
        return json.dumps(shown, ensure_ascii=False, indent=1)[: spec.limits.analysis_chars]
    limit = spec.limits.episodes_chars
    if spec.episode_formatter is format_episodes:  # the bundled one builds only what is kept
        return "## Raw episodes\n" + format_episodes(state.episodes, limit)
    formatter = getattr(spec.episode_formatter, "__qualname__", "the episode formatter")
    try:
        formatted = call_user(spec.episode_formatter, state.episodes)
    except UserCodeError as error:  # only this prompt fails
        message = f"episode formatter {formatter} raised {error}"
        raise PromptInputError(f"cannot render the prompt: {message}") from error.raised
    if not isinstance(formatted, str):
        kind = type(formatted).__name__
        message = f"episode formatter {formatter} returned a {kind}, not a str"
        raise PromptInputError(f"cannot render the prompt: {message}")
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
    values = {
        "tool_specs": render_tool_specs(spec),
        "version": state.lib_snapshot.get("version", 0),
        "n_cards": len(cards),
        "skill_catalog": render_catalog(cards, spec),
        "last_receipt": state.last_receipt,
        "analysis_block": render_analysis_block(state, spec),
        "max_ops": spec.limits.max_ops,
        "param_rule": spec.param_rule,
    }
    # Widths first: rendering a field to check its accessors would allocate the width.
    checks = [(f, nested_width_error) for f in nested_fields(spec.template)]
    checks += [(f, field_error) for f in accessor_fields(spec.template)]
    for field, check in checks:
        problem = check(field, values)
        if problem:
            raise PromptInputError(f"cannot render the prompt: placeholder {problem}")
    try:
        return spec.template.format(**values)
    except RENDER_ERRORS as exc:  # the template fits some states only (``{version:05d}``)
        problem = render_error(spec.template, values) or f"{type(exc).__name__}: {exc}"
        raise PromptInputError(f"cannot render the prompt: placeholder {problem}") from None
