"""Loading the four prompt inputs from files, import paths and STATEPOOL_* settings."""

from __future__ import annotations

import json
import string
import sys
import uuid
from pathlib import Path

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.errors import StatepoolError
from statepool_dagster.core.prompts.render import build_curator_prompt
from statepool_dagster.core.prompts.spec import PromptSpec, default_prompt_spec
from statepool_dagster.core.prompts.template import format_episodes
from statepool_dagster.core.states.models import CheckpointState

DEFAULTS = (
    Path(__file__).resolve().parents[2] / "statepool_dagster" / "core" / "prompts" / "defaults"
)
EIGHT = {
    "tool_specs",
    "version",
    "n_cards",
    "skill_catalog",
    "last_receipt",
    "analysis_block",
    "max_ops",
    "param_rule",
}
TEMPLATE = "T[{version}] {n_cards} cards\n{tool_specs}\n{param_rule}\n{max_ops}"
TOOLS = {"add_card": {"description": "add one"}, "zap": {"description": "zap {it}", "params": {}}}


@pytest.fixture
def module_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a uniquely named module into ``tmp_path`` and put it on ``sys.path``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(source: str) -> str:
        name = f"promptmod_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        made.append(name)
        return name

    yield make
    for name in made:
        sys.modules.pop(name, None)


def a_state() -> CheckpointState:
    return CheckpointState(
        state_id="r_ckpt2",
        dataset="ovo",
        lib_snapshot={"version": 2, "cards": []},
        episodes=[{"id": "e1", "question": "q?", "correct": True}],
        analysis=None,
        last_receipt="(collected offline)",
    )


def test_template_is_read_from_a_text_file(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("Version {version} — ü {{literal}}", encoding="utf-8")
    spec = PromptSpec.load(template=str(path))
    assert spec.template == "Version {version} — ü {{literal}}"
    assert build_curator_prompt(a_state(), spec) == "Version 2 — ü {literal}"


def test_param_rule_is_read_from_a_text_file(tmp_path):
    path = tmp_path / "rule.txt"
    path.write_text("- rule from file {not a placeholder}", encoding="utf-8")
    spec = PromptSpec.load(param_rule=str(path))
    assert spec.param_rule == "- rule from file {not a placeholder}"
    assert "- rule from file {not a placeholder}" in build_curator_prompt(a_state(), spec)


def test_template_and_param_rule_are_imported_from_module_attr(module_factory):
    mod = module_factory(f"PROMPT = {TEMPLATE!r}\nclass Holder:\n    RULE = 'nested rule'\n")
    spec = PromptSpec.load(template=f"{mod}:PROMPT", param_rule=f"{mod}:Holder.RULE")
    assert spec.template == TEMPLATE
    assert spec.param_rule == "nested rule"


def test_tool_specs_are_read_from_a_json_file(tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS), encoding="utf-8")
    spec = PromptSpec.load(template=None, tool_specs=str(path))
    assert spec.tool_specs == TOOLS


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_tool_specs_are_read_from_a_yaml_file(tmp_path, suffix):
    path = tmp_path / f"tools{suffix}"
    path.write_text(
        "add_card:\n  description: add one\nzap:\n  description: 'zap {it}'\n  params: {}\n",
        encoding="utf-8",
    )
    assert PromptSpec.load(tool_specs=str(path)).tool_specs == TOOLS


def test_tool_specs_are_imported_from_module_attr(module_factory):
    mod = module_factory(f"TOOL_SPECS = {TOOLS!r}\n")
    spec = PromptSpec.load(template=None, tool_specs=f"{mod}:TOOL_SPECS")
    assert spec.tool_specs == TOOLS
    prompt = build_curator_prompt(a_state(), spec.model_copy(update={"template": "{tool_specs}"}))
    assert prompt == "- add_card: add one\n- zap: zap {it}"


def test_formatter_is_imported_from_module_func(module_factory):
    mod = module_factory("def fmt(episodes):\n    return 'MOD:' + str(len(episodes))\n")
    spec = PromptSpec.load(episode_formatter=f"{mod}:fmt")
    assert spec.episode_formatter([{}, {}]) == "MOD:2"
    prompt = build_curator_prompt(
        a_state(), spec.model_copy(update={"template": "{analysis_block}"})
    )
    assert prompt == "## Raw episodes\nMOD:1"


def test_formatter_is_loaded_from_py_file_func(tmp_path):
    path = tmp_path / "my_reflector.py"
    path.write_text("def show(episodes):\n    return 'FILE:' + episodes[0]['id']\n", "utf-8")
    spec = PromptSpec.load(episode_formatter=f"{path}:show")
    assert spec.episode_formatter([{"id": "e9"}]) == "FILE:e9"


def test_env_vars_select_template_rule_tool_specs_and_formatter(tmp_path, module_factory):
    template = tmp_path / "t.txt"
    template.write_text(TEMPLATE + "\n{analysis_block}", encoding="utf-8")
    rule = module_factory("RULE = 'env rule'\n")
    tools = tmp_path / "tools.yaml"
    tools.write_text("only:\n  description: the only tool\n", encoding="utf-8")
    formatter = tmp_path / "fmt.py"
    formatter.write_text("def f(episodes):\n    return 'ENV-FMT'\n", encoding="utf-8")
    environ = {
        "STATEPOOL_PROMPT_TEMPLATE": str(template),
        "STATEPOOL_PARAM_RULE": f"{rule}:RULE",
        "STATEPOOL_TOOL_SPECS": str(tools),
        "STATEPOOL_EPISODE_FORMATTER": f"{formatter}:f",
    }
    spec = Settings.from_env(environ=environ).prompt_spec()
    assert build_curator_prompt(a_state(), spec) == (
        "T[2] 0 cards\n- only: the only tool\nenv rule\n3\n## Raw episodes\nENV-FMT"
    )


def test_no_env_vars_means_the_bundled_defaults():
    spec = Settings.from_env(environ={}).prompt_spec()
    assert spec.template == (DEFAULTS / "curator_prompt.txt").read_text(encoding="utf-8")
    assert spec.param_rule == (DEFAULTS / "param_rule.txt").read_text(encoding="utf-8")
    assert spec.tool_specs == json.loads((DEFAULTS / "tool_specs.json").read_text("utf-8"))
    assert spec.episode_formatter is format_episodes


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("ok {version} but {bogus}", "{bogus}"),
        ("{n_cards} {unknown_thing.attr}", "unknown_thing"),
        ("positional {}", "{}"),
        ("indexed {0}", "{0}"),
        ("nested in a format spec {version:{width}}", "width"),
    ],
)
def test_template_with_unknown_placeholder_fails_naming_it(tmp_path, template, named):
    path = tmp_path / "bad.txt"
    path.write_text(template, encoding="utf-8")
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(template=str(path))
    assert named in str(err.value)
    with pytest.raises(StatepoolError) as err:
        Settings.from_env(environ={"STATEPOOL_PROMPT_TEMPLATE": str(path)}).prompt_spec()
    assert named in str(err.value)


def test_template_that_is_not_a_format_string_fails_clearly(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("single brace { never closed", encoding="utf-8")
    with pytest.raises(StatepoolError, match="format string"):
        PromptSpec.load(template=str(path))


@pytest.mark.parametrize(
    "field", ["prompt_template", "param_rule", "tool_specs", "episode_formatter"]
)
def test_import_path_that_does_not_resolve_fails_naming_it(field):
    ref = "no_such_module_zq81.sub:THING"
    environ = {Settings.env_name(field): ref}
    with pytest.raises(StatepoolError) as err:
        Settings.from_env(environ=environ).prompt_spec()
    assert "no_such_module_zq81.sub" in str(err.value)


@pytest.mark.parametrize(
    "field", ["prompt_template", "param_rule", "tool_specs", "episode_formatter"]
)
def test_missing_attribute_of_an_existing_module_fails_naming_it(module_factory, field):
    mod = module_factory("PRESENT = 1\n")
    environ = {Settings.env_name(field): f"{mod}:ABSENT_ATTR"}
    with pytest.raises(StatepoolError, match="ABSENT_ATTR"):
        Settings.from_env(environ=environ).prompt_spec()


def test_reference_that_is_neither_file_nor_import_path_fails_naming_it(tmp_path):
    missing = str(tmp_path / "no_such_prompt.txt")
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(template=missing)
    assert missing in str(err.value)


def test_invalid_yaml_tool_specs_fail_with_statepool_error_naming_the_file(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("add_card: [unclosed\n  description: x\n", encoding="utf-8")
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(tool_specs=str(path))
    assert str(path) in str(err.value)


def test_invalid_json_tool_specs_fail_with_statepool_error_naming_the_file(tmp_path):
    path = tmp_path / "tools.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(tool_specs=str(path))
    assert str(path) in str(err.value)


def test_tool_spec_without_description_fails_naming_the_tool(tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"broken_tool": {"params": {}}}), encoding="utf-8")
    with pytest.raises(StatepoolError, match="broken_tool"):
        PromptSpec.load(tool_specs=str(path))


def test_formatter_that_is_not_callable_fails(module_factory):
    mod = module_factory("NOT_A_FUNCTION = 'text'\n")
    with pytest.raises(StatepoolError, match="not callable"):
        PromptSpec.load(episode_formatter=f"{mod}:NOT_A_FUNCTION")


def test_bundled_default_template_uses_all_eight_placeholders():
    template = (DEFAULTS / "curator_prompt.txt").read_text(encoding="utf-8")
    used = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    assert used == EIGHT
    assert default_prompt_spec().template == template


def test_bundled_defaults_render_a_prompt_with_every_part():
    prompt = build_curator_prompt(a_state(), default_prompt_spec())
    assert "{" + "tool_specs}" not in prompt
    for name in json.loads((DEFAULTS / "tool_specs.json").read_text("utf-8")):
        assert f"- {name}: " in prompt
    assert (DEFAULTS / "param_rule.txt").read_text(encoding="utf-8") in prompt
    assert "(empty library)" in prompt and "(collected offline)" in prompt
    assert "## Raw episodes\n1 episodes, 1/1 correct" in prompt


@pytest.mark.parametrize(
    ("template", "tools", "named"),
    [
        ("{max_ops!x}", TOOLS, "{max_ops!x}"),  # an unknown conversion
        ("{version:{max_ops:{n_cards}}}", TOOLS, "{version:{max_ops:{n_cards}}}"),  # too deep
        ("{version.}", TOOLS, "{version.}"),
        ("{last_receipt[0]x}", TOOLS, "{last_receipt[0]x}"),
        ("{analysis_block:05d}", TOOLS, "{analysis_block:05d}"),  # a text is never a number
        ("{n_cards[0]}", TOOLS, "{n_cards[0]}"),
        ("{n_cards:s}", TOOLS, "{n_cards:s}"),
        ("{skill_catalog[x]}", TOOLS, "{skill_catalog[x]}"),
        ("{tool_specs[0]}", {}, "{tool_specs[0]}"),  # no tool: an empty text, always
        ("{param_rule:>{max_ops:d}.{max_ops:s}}", TOOLS, "{param_rule:"),
        ("{skill_catalog.upper}", TOOLS, "memory address"),  # a method's repr
        ("{version.bit_length}", TOOLS, "{version.bit_length}"),
        ("{last_receipt.__len__}", TOOLS, "memory address"),
        ("{n_cards:>999999999}", TOOLS, "999999999"),  # a 1 GB prompt
        ("{n_cards:>99999999999999999999}", TOOLS, "{n_cards:>99999999999999999999}"),
    ],
)
def test_template_no_state_can_fill_is_refused_when_loaded_naming_the_field(
    tmp_path, template, tools, named
):
    (tmp_path / "t.txt").write_text(template, encoding="utf-8")
    (tmp_path / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(template=str(tmp_path / "t.txt"), tool_specs=str(tmp_path / "tools.json"))
    message = str(err.value)
    assert named in message
    assert message.startswith("curator template: ") and "\n" not in message


@pytest.mark.parametrize(
    "template",
    [
        "{version:05d}",  # a text version fails, an int renders
        "{version[0]}",  # a list version renders
        "{last_receipt[40]}",  # a long receipt renders
        "{version:{last_receipt}}",  # a receipt ">5" renders
        "{tool_specs[0]}",
        "{version.real}{n_cards.numerator}{skill_catalog.__class__.__name__}",
        "{version!r:>6}{last_receipt!s:^30}{version:{max_ops}}{{x}}",
        "{version.__class__}",  # prints <class 'int'>: no address
        "{n_cards:{analysis_block[1]}}",  # an index in the spec: a longer text renders
    ],
)
def test_template_that_fits_some_states_is_accepted(template):
    spec = PromptSpec(
        template=template,
        param_rule="r",
        tool_specs=TOOLS,
        episode_formatter=format_episodes,
    )
    assert spec.template == template


@pytest.mark.parametrize(
    ("data", "module_text"),
    [
        (b"A {version}\r\nB\r\n", "A {version}\nB\n"),  # CRLF: as Python reads source
        (b"A\rB", "A\nB"),  # a lone CR too
        (b"\xef\xbb\xbfA {version}", "A {version}"),  # a BOM is no part of the text
        (b"A {version}\n", "A {version}\n"),  # a final newline is kept
        ("Ü — 日本 {version}".encode(), "Ü — 日本 {version}"),
    ],
)
def test_template_file_is_the_string_a_module_would_hold(
    tmp_path, module_factory, data, module_text
):
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    module = module_factory(
        "T = " + '"""' + data.decode("utf-8-sig").replace("\\", "\\\\") + '"""\n'
    )
    from_module = PromptSpec.load(template=f"{module}:T").template
    assert from_module == module_text
    assert PromptSpec.load(template=str(path)).template == module_text
    assert PromptSpec.load(param_rule=str(path)).param_rule == module_text


def test_template_file_that_is_not_utf8_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Café {version}".encode("latin-1"))
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(template=str(path))
    assert str(path) in str(err.value) and "not UTF-8" in str(err.value)


def test_tool_specs_json_file_with_a_bom_is_read(tmp_path):
    path = tmp_path / "tools.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(TOOLS).encode("utf-8"))
    assert PromptSpec.load(tool_specs=str(path)).tool_specs == TOOLS


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
        ("T = 'unterminated\n", "SyntaxError"),
        ("import no_such_package_zq81\n", "no_such_package_zq81"),
    ],
)
@pytest.mark.parametrize("field", ["prompt_template", "tool_specs", "episode_formatter"])
def test_an_inference_module_that_fails_to_import_is_refused_naming_it(
    module_factory, source, said, field
):
    mod = module_factory(source)
    with pytest.raises(StatepoolError) as err:
        Settings.from_env(environ={Settings.env_name(field): f"{mod}:T"}).prompt_spec()
    assert mod in str(err.value) and said in str(err.value)


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
        ("def f(episodes):\n    return 'x\n", "SyntaxError"),
    ],
)
def test_a_formatter_file_that_fails_to_load_is_refused_naming_it(tmp_path, source, said):
    path = tmp_path / "my_reflector.py"
    path.write_text(source, encoding="utf-8")
    with pytest.raises(StatepoolError) as err:
        PromptSpec.load(episode_formatter=f"{path}:f")
    assert str(path) in str(err.value) and said in str(err.value)


@pytest.mark.parametrize(
    ("field", "source", "said"),
    [
        ("prompt_template", "T = '{version} \\ud800'\n", "curator template: not storable"),
        ("param_rule", "T = 'rule \\udfff'\n", "param rule: not storable"),
        ("tool_specs", "T = {'a': {'description': '\\ud83d'}}\n", "tool specs: not storable"),
    ],
)
def test_a_lone_surrogate_in_the_inference_side_is_refused_when_loaded(
    module_factory, field, source, said
):
    # Every prompt would hold it, and no table or file stores it as UTF-8.
    mod = module_factory(source)
    with pytest.raises(StatepoolError, match=said):
        Settings.from_env(environ={Settings.env_name(field): f"{mod}:T"}).prompt_spec()
