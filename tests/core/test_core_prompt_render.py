"""Rendering under other templates and inference sides: the original's text, or a reject.

Where the original script renders a prompt, ours is the same text; where it raises for a
state, ours raises :class:`PromptInputError` (the prompts stage sets that prompt aside)
naming what is wrong, never another exception. ``tools/prompt_round`` is the fuzz these
cases come from.
"""

from __future__ import annotations

import copy
import tracemalloc
from typing import Any

import pytest

from statepool_dagster.core.errors import PromptInputError
from statepool_dagster.core.prompts.render import build_curator_prompt
from statepool_dagster.core.prompts.spec import PromptSpec
from statepool_dagster.core.stages.prompts import spec_digest
from statepool_dagster.core.states.models import CheckpointState

CARD = {"card_id": "c1", "trigger": "when", "program": "do", "meta_info": {"fired": 2}}
TOOLS = {"add_card": {"description": "add one"}}


def state_dict(**lib: Any) -> dict[str, Any]:
    return {
        "state_id": "r_ckpt1",
        "dataset": "ovo",
        "lib_snapshot": {"version": 1, "cards": [dict(CARD)], **lib},
        "episodes": [{"id": "e1", "question": "q?", "correct": True}],
        "analysis": None,
        "last_receipt": "(collected offline)",
    }


def ours(state: dict[str, Any], spec: PromptSpec) -> str:
    return build_curator_prompt(CheckpointState.model_construct(**copy.deepcopy(state)), spec)


def theirs(seed_module, state: dict[str, Any]) -> str:
    return seed_module.build_curator_prompt(seed_module.CheckpointState(**state), None)


def spec_for(template: str, **fields: Any) -> PromptSpec:
    return PromptSpec(
        template=template,
        param_rule=fields.pop("param_rule", "rule"),
        tool_specs=fields.pop("tool_specs", TOOLS),
        episode_formatter=fields.pop("episode_formatter", lambda episodes: "formatted"),
    )


@pytest.mark.parametrize(
    ("template", "version", "fits", "named"),
    [
        ("{version:05d}", "3", 3, "{version:05d}"),
        ("{version:05d}", 1.5, 3, "{version:05d}"),
        ("ok {n_cards} {version[0]}", 7, [7], "{version[0]}"),
        ("{last_receipt[40]}", 1, 1, "{last_receipt[40]}"),
        ("{n_cards:{version}}", "q", ">4", "{n_cards:{version}}"),
        ("{version.real}", "3", 3, "{version.real}"),
    ],
)
def test_a_field_this_state_cannot_fill_sets_only_its_prompt_aside(
    fake_infer, seed_module, template, version, fits, named
):
    fake_infer(template=template, param_rule="rule", tool_specs=TOOLS)
    spec = PromptSpec.load(
        template="infer.curator.curator:CURATOR_PROMPT",
        tool_specs="infer.tools:TOOL_SPECS",
    )
    state = state_dict(version=version)
    with pytest.raises((ValueError, TypeError, IndexError, AttributeError)):
        theirs(seed_module, state)
    with pytest.raises(PromptInputError) as err:
        ours(state, spec)
    assert named in str(err.value)
    other = state_dict(version=fits)  # the same template, a state it fits: the same text
    other["last_receipt"] = "r" * 50
    assert ours(other, spec) == theirs(seed_module, other)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("raise KeyError('gt')", "raised KeyError: 'gt'"),
        ("return None", "returned a NoneType, not a str"),
        ("return ['a', 'b']", "returned a list, not a str"),
        ("return b'bytes'", "returned a bytes, not a str"),
    ],
)
def test_an_episode_formatter_that_fails_sets_the_prompt_aside_naming_it(tmp_path, body, said):
    path = tmp_path / "my_formatter.py"
    path.write_text(f"def show(episodes):\n    {body}\n", encoding="utf-8")
    formatter = PromptSpec.load(episode_formatter=f"{path}:show").episode_formatter
    spec = spec_for("{analysis_block}", episode_formatter=formatter)
    with pytest.raises(PromptInputError, match="episode formatter show") as err:
        ours(state_dict(), spec)
    assert said in str(err.value)


@pytest.mark.parametrize("field", ["trigger", "program"])
@pytest.mark.parametrize("value", [["a", "b"], [], list(range(400))])
def test_a_list_trigger_or_program_renders_as_the_original_cuts_it(
    fake_infer, seed_module, field, value
):
    fake_infer()
    spec = PromptSpec.load(
        template="infer.curator.curator:CURATOR_PROMPT",
        param_rule="infer.curator.curator:PARAM_RULE_ON",
        tool_specs="infer.tools:TOOL_SPECS",
        episode_formatter="infer.curator.reflector:format_episodes",
    )
    state = state_dict()
    state["lib_snapshot"]["cards"][0][field] = value
    assert ours(state, spec) == theirs(seed_module, state)


@pytest.mark.parametrize("card", [None, 5, "a card", ["x"]])
def test_a_card_that_is_not_an_object_is_a_prompt_input_error(card):
    state = state_dict()
    state["lib_snapshot"]["cards"].append(card)
    with pytest.raises(PromptInputError, match="card 1: not an object"):
        ours(state, spec_for("{skill_catalog}"))


@pytest.mark.parametrize("analysis", [["a"], "text", 5])
def test_an_analysis_that_is_not_an_object_is_a_prompt_input_error(analysis):
    state = state_dict()
    state["analysis"] = analysis
    with pytest.raises(PromptInputError, match="analysis is a"):
        ours(state, spec_for("{analysis_block}"))


def test_attribute_and_item_access_render_as_the_original(fake_infer, seed_module):
    template = (
        "{tool_specs[0]}|{version.real}|{n_cards.numerator}|{skill_catalog.__class__.__name__}"
        "|{version!r:>6}|{last_receipt!s:^30}|{version:{max_ops}}|{{x}}|{param_rule.__doc__}"
    )
    fake_infer(template=template, param_rule="r", tool_specs=TOOLS)
    spec = PromptSpec.load(
        template="infer.curator.curator:CURATOR_PROMPT",
        param_rule="infer.curator.curator:PARAM_RULE_ON",
        tool_specs="infer.tools:TOOL_SPECS",
    )
    state = state_dict()
    assert ours(state, spec) == theirs(seed_module, state)


def test_the_spec_digest_follows_the_tool_specs_order():
    # The order is the prompt's: a reordered inference side must render the prompts again.
    ab = spec_for("{tool_specs}", tool_specs={"a": {"description": "1"}, "b": {"description": "2"}})
    ba = spec_for("{tool_specs}", tool_specs={"b": {"description": "2"}, "a": {"description": "1"}})
    assert ours(state_dict(), ab) != ours(state_dict(), ba)
    assert spec_digest(ab) != spec_digest(ba)


@pytest.mark.parametrize("width", [10**9, "999999999", 10**30])
def test_a_width_the_state_puts_in_a_spec_is_bounded_like_a_literal_one(width):
    # The original would allocate it (a 1 GB prompt per state at 10**9); a literal width
    # that large is refused when the template is loaded.
    state = state_dict(version=width)
    with pytest.raises(PromptInputError, match=r"\{n_cards:\{version\}\}: width or precision"):
        ours(state, spec_for("{n_cards:{version}}"))
    assert ours(state_dict(version=7), spec_for("{n_cards:{version}}")) == "      1"


def test_a_width_the_state_puts_beside_an_accessor_is_refused_before_it_is_allocated():
    # The accessor check renders the field: the width must be refused before that.
    spec = spec_for("{last_receipt[0]:{version}}")
    tracemalloc.start()
    try:
        with pytest.raises(PromptInputError, match="width or precision"):
            ours(state_dict(version=300_000_000), spec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20


def test_the_bundled_formatter_is_keyed_by_its_own_code_not_its_module():
    """The bundled formatter shares ``prompts/template.py``: its key is its code and that of
    the helpers it calls, so an edit elsewhere in the module renders no prompt again."""
    import inspect

    from statepool_dagster.core.prompts import template
    from statepool_dagster.core.stages.prompts import bundled_source

    source = bundled_source(template.format_episodes).decode()
    for helper in (template.format_episodes, template._pieces, template._mark, template._head):
        assert inspect.getsource(helper) in source, helper.__name__
    assert inspect.getsource(template.render_error) not in source
    assert "def fields(" not in source
