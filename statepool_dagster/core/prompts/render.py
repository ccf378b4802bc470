"""Render the curator prompt for a state exactly as the inference side does."""

from __future__ import annotations

import json

from ..states.models import CheckpointState
from .spec import PromptSpec, default_prompt_spec

ANALYSIS_KEYS = ("failure_patterns", "observations", "summary")
EMPTY_CATALOG = "(empty library)"


def render_catalog(cards: list[dict], spec: PromptSpec) -> str:
    """One entry per card: counters, then the cut trigger and program."""
    limits = spec.limits
    lines = []
    for card in cards:
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
    formatted = spec.episode_formatter(state.episodes)
    return "## Raw episodes\n" + formatted[: spec.limits.episodes_chars]


def build_curator_prompt(state: CheckpointState, spec: PromptSpec | None = None) -> str:
    """The curator's input for ``state``: byte-identical to the original under the same spec."""
    spec = spec or default_prompt_spec()
    cards = state.lib_snapshot.get("cards", [])
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
