"""Prompt round: the curator prompt under other templates and inference sides, differentially.

Not collected by pytest (no ``test_`` prefix): run it by hand, under ``nice``::

    nice -n 19 .venv/bin/python tests/prompt_round.py /tmp/pr [--cases 3000] [--seed 1]
        [--syncs 4] [--timeout 20]

It generates, with a seeded RNG, combinations of a curator template, a parameter rule,
tool specs, an episode formatter (each given as ``module:attr`` or as a file, as a user
would set ``STATEPOOL_PROMPT_TEMPLATE`` & co.) and a state (from generated runs, then
mutated), and renders each one twice:

- the original (``../shared/reference/statepool_seed.py`` or ``$STATEPOOL_SEED``), its
  ``infer.*`` imports served by fake modules holding exactly what our loader was given;
- ours, through ``PromptSpec.load`` and ``build_curator_prompt`` (the core function the
  prompts stage calls), in a worker process; a case that takes longer than ``--timeout``
  is killed and recorded as a hang.

Then ``--syncs`` configurations go through the product: ``statepool sync --json`` over
generated and mutated runs, the prompts read back with ``load_prompts`` and the rejects
from ``store/rejects/``, each compared with the original rendering the state file we wrote.

The rule checked: where the original renders, ours is the same text; where it raises,
ours raises a configuration error (``StatepoolError`` naming the placeholder, when the
template is loaded) or sets the prompt aside (``PromptInputError``), never crashes or hangs.
A text file stands for the string a module would hold if its text were written there as a
literal: UTF-8, a leading BOM dropped, newlines read as Python reads source (``\\r\\n`` and
``\\r`` are ``\\n``). Documented divergences are printed ``NOTE``, the rest ``FLAG``; the
exit code is the number of FLAG lines (capped at 100). ``OUTDIR/findings.jsonl`` has them all.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SEED = Path(os.environ.get("STATEPOOL_SEED", REPO.parent / "shared/reference/statepool_seed.py"))
STATEPOOL = Path(sys.executable).with_name("statepool")
NAMES = [
    "tool_specs",
    "version",
    "n_cards",
    "skill_catalog",
    "last_receipt",
    "analysis_block",
    "max_ops",
    "param_rule",
]
STR_NAMES = ["tool_specs", "skill_catalog", "last_receipt", "analysis_block", "param_rule"]
INT_NAMES = ["n_cards", "max_ops", "version"]
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
SURROGATE = re.compile("[\ud800-\udfff]")

# --- generation ---------------------------------------------------------------------------


def _field(rng: random.Random) -> tuple[str, str]:
    """One replacement field and its class."""
    name = rng.choice(NAMES)
    kind = rng.choice(
        ["plain"] * 40
        + ["spec"] * 4
        + ["conv", "conv_spec", "nested"] * 2
        + ["spec", "conv", "conv_spec", "nested", "index", "attr", "bad", "dunder"]
    )
    if kind == "plain":
        return "{" + name + "}", kind
    if kind == "spec":
        spec = rng.choice(
            ["05d", ">8", "<3", "^30", "*^12", ".3", ".10", "x", "s", ",", "+", "e", "0>4", "", "%"]
        )
        return "{" + f"{name}:{spec}" + "}", f"spec:{spec}"
    if kind == "conv":
        return "{" + f"{name}!{rng.choice('rsa')}" + "}", kind
    if kind == "conv_spec":
        return (
            "{" + f"{name}!{rng.choice('rsa')}:{rng.choice(['^30', '>5', '.4', 'd'])}" + "}",
            kind,
        )
    if kind == "nested":
        inner = rng.choice(["max_ops", "n_cards", "version", "last_receipt"])
        return "{" + f"{name}:{{{inner}}}" + "}", f"nested:{inner}"
    if kind == "index":
        key = rng.choice(["0", "1", "-1", "x", "999", "00"])
        return "{" + f"{name}[{key}]" + "}", f"index:{key}"
    if kind == "attr":
        attr = rng.choice(["real", "imag", "numerator", "upper", "bit_length", "denominator"])
        return "{" + f"{name}.{attr}" + "}", f"attr:{attr}"
    if kind == "dunder":
        attr = rng.choice(["__len__", "__class__", "__class__.__name__", "__doc__"])
        return "{" + f"{name}.{attr}" + "}", f"dunder:{attr}"
    bad = rng.choice(
        [
            "{" + name + "!x}",
            "{" + name + "!}",
            "{" + name + ".}",
            "{" + name + "[0]x}",
            "{" + name + ":{max_ops:{n_cards}}}",
            "{}",
            "{0}",
            "{" + name + "[}",
            "{unknown_name}",
            "{" + name,
            name + "}",
            "{" + name + ":{}}",
            "{" + name + ":>99999999999999999999}",
        ]
    )
    return bad, "bad"


TEXTS = ["", " ", "\n", "Ünïcödé — 日本語 ", "{{literal}}", "}}", "{{", "\r\n", "\t", "x" * 50]


def gen_template(rng: random.Random) -> tuple[str, list[str]]:
    # "single": one field alone, so each kind of field is seen without another failing it.
    shape = rng.choice(["mix"] * 6 + ["single"] * 5 + ["all", "empty", "long", "none", "repeat"])
    if shape == "empty":
        return "", ["empty"]
    if shape == "none":
        return rng.choice(TEXTS) + "no placeholder", ["none"]
    if shape == "all":
        names = NAMES[:]
        rng.shuffle(names)
        return "\n".join("{" + n + "}" for n in names), ["all"]
    pieces, classes = [], []
    count = {"mix": rng.randint(1, 8), "single": 1, "long": 60, "repeat": 4}[shape]
    fields = [_field(rng) for _ in range(count)]
    if shape == "repeat":
        fields = fields[:1] * 4
    for field, cls in fields:
        pieces.append(rng.choice(TEXTS))
        pieces.append(field)
        classes.append(cls)
    pieces.append(rng.choice(TEXTS))
    text = "".join(pieces)
    if shape == "long":
        text = text + ("long line of template text ü\n" * rng.randint(100, 3000))
    if rng.random() < 0.15:
        text = text.replace("\n", "\r\n")
        classes.append("crlf")
    return text, sorted(set(classes))


def gen_param_rule(rng: random.Random) -> str:
    return rng.choice(
        ["", "- rule {not a placeholder}", "règle — 規則\n" * 3, "x" * 3000, "a\r\nb", "}{"]
    )


def gen_tool_specs(rng: random.Random) -> tuple[Any, str]:
    kind = rng.choice(["bundled", "empty", "unicode", "braces", "many", "odd", "broken"])
    if kind == "bundled":
        path = REPO / "statepool_dagster/core/prompts/defaults/tool_specs.json"
        return json.loads(path.read_text("utf-8")), kind
    if kind == "empty":
        return {}, kind
    if kind == "unicode":
        return {"ajouter_carte": {"description": "Ajoute — 追加"}, "z": {"description": "ß"}}, kind
    if kind == "braces":
        return {
            "b": {"description": "uses {x} and {0}\nsecond line {{y}}"},
            "a": {"description": "}"},
        }, kind
    if kind == "many":
        names = [f"tool_{rng.randint(0, 10**6)}" for _ in range(rng.randint(20, 200))]
        return {n: {"description": f"does {n}", "params": {}} for n in names}, kind
    if kind == "odd":
        return {
            "z": {"description": None},
            "a": {"description": 5},
            "m": {"description": ["l"]},
        }, kind
    return rng.choice([{"nodesc": {"params": {}}}, {"s": "not a dict"}, ["a", "b"]]), kind


FORMATTERS = {
    "bundled": None,  # ours: no reference (the default); the original: the same function
    "reexport": "from statepool_dagster.core.prompts.formatting import format_episodes as fmt\n",
    "prefixed": (
        "from statepool_dagster.core.prompts.formatting import format_episodes as _b\n"
        "def fmt(episodes):\n    return 'PRE {x} ' + _b(episodes)\n"
    ),
    "long_ascii": "def fmt(episodes):\n    return 'a' * 7000 + str(len(episodes))\n",
    "long_unicode": "def fmt(episodes):\n    return 'é日' * 4000\n",
    "astral": "def fmt(episodes):\n    return '😀' * 6000\n",
    "returns_list": "def fmt(episodes):\n    return list(range(6000))\n",
    "returns_none": "def fmt(episodes):\n    return None\n",
    "returns_bytes": "def fmt(episodes):\n    return b'bytes'\n",
    "returns_int": "def fmt(episodes):\n    return 5\n",
    "raises": "def fmt(episodes):\n    raise KeyError('no such episode field')\n",
    "surrogate": "def fmt(episodes):\n    return 'lone \\ud800 surrogate'\n",
    "raises_value": "def fmt(episodes):\n    return episodes[0]['id'] + 'x'\n",
}


def _mutate_card(rng: random.Random, card: Any) -> tuple[Any, str]:
    if not isinstance(card, dict):
        return card, "noop"
    card = dict(card)
    what = rng.choice(
        [
            "drop_id",
            "drop_trigger",
            "drop_program",
            "drop_meta",
            "meta",
            "trigger",
            "program",
            "card_id",
            "not_dict",
            "counters",
        ]
    )
    odd = [["a", "b"], [], {"k": 1}, 5, 2.5, None, True, "é" * 300, "{x} }{", list(range(300))]
    if what.startswith("drop_"):
        card.pop({"drop_id": "card_id", "drop_trigger": "trigger"}.get(what, what[5:]), None)
        if what == "drop_meta":
            card.pop("meta_info", None)
    elif what == "meta":
        card["meta_info"] = rng.choice([None, [], "x", 3, {}, {"injected": "many"}])
    elif what in ("trigger", "program"):
        card[what] = rng.choice(odd)
    elif what == "card_id":
        card["card_id"] = rng.choice([7, 1.5, None, ["x"], "{id}", True])
    elif what == "counters":
        card["meta_info"] = {"injected": 10**30, "fired": -1, "helped": 0.5, "harmful": "é"}
    else:
        return rng.choice(["a card", 5, None, ["x"]]), what
    return card, what


def gen_state(rng: random.Random, bases: list[dict]) -> tuple[dict, list[str]]:
    state = json.loads(json.dumps(rng.choice(bases)))
    lib = state["lib_snapshot"]
    classes = []
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        cards = lib.get("cards")
        if isinstance(cards, list) and cards:
            i = rng.randrange(len(cards))
            cards[i], cls = _mutate_card(rng, cards[i])
            classes.append(f"card:{cls}")
    roll = rng.random()
    if roll < 0.2:
        v = rng.choice(["missing", 1.0, 2.5, "3", True, False, None, [1], 10**20, -4, "v{x}"])
        if v == "missing":
            lib.pop("version", None)
        else:
            lib["version"] = v
        classes.append(f"version:{v!r}")
    elif roll < 0.28:
        cards = rng.choice(["missing", [], {}, "", {"a": 1}, "abc", None, 5])
        if cards == "missing":
            lib.pop("cards", None)
        else:
            lib["cards"] = cards
        classes.append(f"cards:{cards!r}")
    elif roll < 0.32:
        one = {"card_id": "c", "trigger": "t", "program": "p", "meta_info": {}}
        lib["cards"] = [dict(one, card_id=f"c{i}") for i in range(rng.randint(500, 3000))]
        classes.append("huge_catalog")
    if rng.random() < 0.35:
        state["analysis"] = rng.choice(
            [
                {"failure_patterns": ["p"], "observations": ["o"], "summary": "s"},
                {"summary": "résumé {x} " * 800, "extra": 1},
                {},
                {"summary": float("nan")},
            ]
        )
        classes.append("analysis")
    if rng.random() < 0.3:
        state["last_receipt"] = rng.choice(["", "{not} a field", "reçu ✓\n" * 100, "}{"])
        classes.append("receipt")
    if rng.random() < 0.1:
        state["episodes"] = []
        classes.append("no_episodes")
    return state, classes


def make_cases(n: int, seed: int, bases: list[dict]) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        template, t_classes = gen_template(rng)
        tools, t_kind = gen_tool_specs(rng)
        state, s_classes = gen_state(rng, bases)
        cases.append(
            {
                "i": i,
                "template": template,
                "template_as": rng.choice(["module", "module", "file", "file_crlf", "file_bom"]),
                "param_rule": gen_param_rule(rng),
                "rule_as": rng.choice(["module", "file"]),
                "tools": tools,
                "tools_as": rng.choice(["module", "json", "yaml"]),
                "formatter": rng.choice(list(FORMATTERS)[:6] * 3 + list(FORMATTERS)[6:]),
                "state": state,
                "classes": [*t_classes, f"tools:{t_kind}", *s_classes],
            }
        )
    return cases


def base_states(work: Path, seed_module: types.ModuleType) -> list[dict]:
    """States the original collects from a few generated runs (empty libraries included)."""
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

    runs = work / "base_runs"
    specs = [
        SampleSpec(n_checkpoints=4, n_cards=5, emb_dim=3, episodes_per_batch=4, seed=3),
        SampleSpec(n_checkpoints=3, n_cards=0, emb_dim=3, episodes_per_batch=2, seed=4),
        SampleSpec(n_checkpoints=3, n_cards=30, emb_dim=3, episodes_per_batch=40, seed=5),
    ]
    states = []
    for i, spec in enumerate(specs):
        run = generate_run(runs / f"run{i}", spec, run_index=i)
        out = work / "base_pool" / run.name
        seed_module.collect_from_run(str(run), str(out))
        states += [json.loads(p.read_text("utf-8")) for p in sorted(out.glob("*.json"))]
    return states


# --- the original, with a fake inference side ------------------------------------------------


def load_original() -> types.ModuleType:
    import importlib.util

    for name in ("infer", "infer.curator", "infer.curator.curator", "infer.curator.reflector"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["infer.tools"] = types.ModuleType("infer.tools")
    spec = importlib.util.spec_from_file_location("statepool_seed_prompt_round", SEED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def set_inference_side(template: str, rule: str, tools: Any, formatter: Any) -> None:
    sys.modules["infer.curator.curator"].CURATOR_PROMPT = template
    sys.modules["infer.curator.curator"].PARAM_RULE_ON = rule
    sys.modules["infer.tools"].TOOL_SPECS = tools
    sys.modules["infer.curator.reflector"].format_episodes = formatter


def as_source(text: str) -> str:
    """The string a module holds when ``text`` is written there between quotes."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def original_prompt(seed: types.ModuleType, state: dict) -> dict:
    try:
        built = seed.CheckpointState(**state)
        return {"ok": True, "prompt": seed.build_curator_prompt(built, None)}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


# --- the worker: both renderings, one case at a time -------------------------------------------


def _write_inputs(case: dict, work: Path) -> dict[str, str | None]:
    """The four references, as a user would give them, and what the original is given."""
    import yaml

    tag = f"prc_{case['i']}"
    source, refs = [], {}
    t = case["template"]
    if case["template_as"] == "module":
        source.append(f"CURATOR_PROMPT = {t!r}")
        refs["template"] = f"{tag}:CURATOR_PROMPT"
    else:
        data = t.encode("utf-8")
        if case["template_as"] == "file_crlf":
            data = t.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")
        if case["template_as"] == "file_bom":
            data = b"\xef\xbb\xbf" + data
        (work / f"{tag}_template.txt").write_bytes(data)
        refs["template"] = str(work / f"{tag}_template.txt")
    if case["rule_as"] == "module":
        source.append(f"PARAM_RULE_ON = {case['param_rule']!r}")
        refs["param_rule"] = f"{tag}:PARAM_RULE_ON"
    else:
        (work / f"{tag}_rule.txt").write_bytes(case["param_rule"].encode("utf-8"))
        refs["param_rule"] = str(work / f"{tag}_rule.txt")
    tools = case["tools"]
    if case["tools_as"] == "module":
        source.append(f"TOOL_SPECS = {tools!r}")
        refs["tools"] = f"{tag}:TOOL_SPECS"
    elif case["tools_as"] == "json":
        (work / f"{tag}_tools.json").write_text(json.dumps(tools, ensure_ascii=False), "utf-8")
        refs["tools"] = str(work / f"{tag}_tools.json")
    else:
        text = yaml.safe_dump(tools, allow_unicode=True, sort_keys=False)
        (work / f"{tag}_tools.yaml").write_text(text, "utf-8")
        refs["tools"] = str(work / f"{tag}_tools.yaml")
    fmt = FORMATTERS[case["formatter"]]
    refs["formatter"] = None
    if fmt is not None:
        source.append(fmt)
        refs["formatter"] = f"{tag}:fmt"
    (work / f"{tag}.py").write_text("\n".join(source) + "\n", "utf-8")
    return refs


def _probe_states(bases: list[dict]) -> list[dict]:
    """The base states, and their versions and receipts in other shapes."""
    probes = [json.loads(json.dumps(b)) for b in bases]
    for version in ("1", 1.5, [1, 2], {"a": 1}, None, True, 10**6):
        probe = json.loads(json.dumps(bases[0]))
        probe["lib_snapshot"]["version"] = version
        probes.append(probe)
    for receipt in ("", "5", ">40", "r" * 100):
        probe = json.loads(json.dumps(bases[-1]))
        probe["last_receipt"] = receipt
        probes.append(probe)
    return probes


def _renders_elsewhere(seed: types.ModuleType, probes: list[dict]) -> str | None:
    """A state the original renders (without a memory address) under the current side."""
    for probe in probes:
        result = original_prompt(seed, probe)
        if result["ok"] and not ADDRESS.search(result["prompt"]):
            return f"{probe['state_id']} (version {probe['lib_snapshot'].get('version')!r})"
    return None


def run_case(case: dict, work: Path, seed: types.ModuleType, probes: list[dict]) -> dict:
    import importlib

    from statepool_dagster.core.errors import PromptInputError, StatepoolError
    from statepool_dagster.core.prompts.formatting import format_episodes
    from statepool_dagster.core.prompts.render import build_curator_prompt
    from statepool_dagster.core.prompts.spec import PromptSpec
    from statepool_dagster.core.states.models import CheckpointState

    refs = _write_inputs(case, work)
    module = importlib.import_module(f"prc_{case['i']}")
    template = case["template"]
    if case["template_as"] != "module":
        template = as_source(template)
    rule = case["param_rule"] if case["rule_as"] == "module" else as_source(case["param_rule"])
    formatter = getattr(module, "fmt", format_episodes)
    # JSON and YAML files hold what json/yaml give back: the dict the original is given.
    set_inference_side(template, rule, case["tools"], formatter)
    orig = original_prompt(seed, case["state"])
    ours: dict[str, Any]
    try:
        spec = PromptSpec.load(
            template=refs["template"],
            param_rule=refs["param_rule"],
            tool_specs=refs["tools"],
            episode_formatter=refs["formatter"],
        )
    except StatepoolError as exc:
        ours = {"outcome": "config_error", "error": str(exc)[:300]}
    except Exception as exc:
        ours = {"outcome": "crash", "error": f"load: {type(exc).__name__}: {exc}"[:300]}
    else:
        try:
            state = CheckpointState.model_construct(**case["state"])
            ours = {"outcome": "prompt", "prompt": build_curator_prompt(state, spec)}
        except PromptInputError as exc:
            ours = {"outcome": "reject", "error": str(exc)[:300]}
        except Exception as exc:
            ours = {"outcome": "crash", "error": f"render: {type(exc).__name__}: {exc}"[:300]}
    sys.modules.pop(f"prc_{case['i']}", None)
    result = judge(case, orig, ours)
    if ours["outcome"] == "config_error" and result["level"] == "OK":
        # Refused for every state: the original must render none of them either.
        elsewhere = _renders_elsewhere(seed, probes)
        if elsewhere:
            result["level"] = "FLAG"
            result["why"] = f"refused when loaded, but the original renders {elsewhere}"
    return result


def judge(case: dict, orig: dict, ours: dict) -> dict:
    level, why = "OK", ""
    outcome = ours["outcome"]
    if outcome == "crash":
        level, why = "FLAG", "ours crashed: " + ours["error"]
    elif orig["ok"] and outcome == "prompt":
        if ours["prompt"] != orig["prompt"]:
            if ADDRESS.search(orig["prompt"]):
                level, why = "NOTE", "the original prints a memory address; ours differs"
            else:
                level, why = (
                    "FLAG",
                    "prompts differ: " + _first_diff(orig["prompt"], ours["prompt"]),
                )
    elif orig["ok"] and SURROGATE.search(orig["prompt"]):
        level, why = "NOTE", f"the original's prompt is not UTF-8 storable; ours: {ours['error']}"
    elif orig["ok"]:
        if ADDRESS.search(orig["prompt"]):
            level, why = "NOTE", f"original prints an object's address; ours: {ours['error']}"
        else:
            level, why = "FLAG", f"the original renders; ours {outcome}: {ours['error']}"
    elif outcome == "prompt":
        level, why = "FLAG", f"the original raises ({orig['error']}); ours renders"
    return {
        "i": case["i"],
        "level": level,
        "why": why[:400],
        "classes": case["classes"],
        "formatter": case["formatter"],
        "ours": outcome,
        "original": "prompt" if orig["ok"] else orig["error"][:120],
    }


def _first_diff(a: str, b: str) -> str:
    n = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"at char {n} (lengths {len(a)}/{len(b)}): {a[n : n + 40]!r} vs {b[n : n + 40]!r}"


def worker(cases_path: Path, start: int, results_path: Path, work: Path) -> None:
    sys.path.insert(0, str(work))
    seed = load_original()
    cases = json.loads(cases_path.read_text("utf-8"))
    probes = _probe_states(json.loads((cases_path.parent / "bases.json").read_text("utf-8")))
    with results_path.open("a", encoding="utf-8") as out:
        for case in cases[start:]:
            result = run_case(case, work, seed, probes)
            out.write(json.dumps(result) + "\n")
            out.flush()


def run_bulk(outdir: Path, cases: list[dict], timeout: float) -> list[dict]:
    cases_path, results_path = outdir / "cases.json", outdir / "results.jsonl"
    cases_path.write_text(json.dumps(cases, ensure_ascii=False), "utf-8")
    results_path.write_text("", "utf-8")
    work = outdir / "work"
    work.mkdir(exist_ok=True)
    hangs: list[dict] = []
    start = 0
    while start < len(cases):
        cmd = [sys.executable, __file__, "--worker", str(cases_path), str(start), str(results_path)]
        proc = subprocess.Popen([*cmd, str(work)])
        done, last_change = 0, time.monotonic()
        while proc.poll() is None:
            time.sleep(0.2)
            now_done = len(results_path.read_text("utf-8").splitlines())
            if now_done != done:
                done, last_change = now_done, time.monotonic()
            elif time.monotonic() - last_change > timeout:
                proc.kill()
                proc.wait()
                break
        done = len(results_path.read_text("utf-8").splitlines())
        if done >= len(cases):
            break
        stuck = cases[done]
        level = "FLAG"
        hangs.append(
            {
                "i": done,
                "level": level,
                "why": f"hang or worker death (rc {proc.returncode})",
                "classes": stuck["classes"],
                "formatter": stuck["formatter"],
                "ours": "hang",
                "original": "?",
            }
        )
        with results_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(hangs[-1]) + "\n")
        start = done + 1
    return [json.loads(line) for line in results_path.read_text("utf-8").splitlines()]


# --- the product: statepool sync, then the prompts table --------------------------------------


# (name, template, rule, tools, formatter, as files): ``None`` is the bundled default.
SYNC_CONFIGS = [
    ("bundled", None, None, None, "bundled", False),
    (
        "spec_fields",
        "V{version:>6} N{n_cards:05d} M{max_ops!r}\n{last_receipt!s:^30}\n"
        "{skill_catalog}\n{analysis_block}\n{tool_specs}\n{param_rule}",
        "rule ü {x}",
        {"b": {"description": "b {0}"}, "a": {"description": "a\nb"}},
        "long_unicode",
        False,
    ),
    (
        "files_crlf_bom",
        "Ü {version}\r\n{tool_specs}\r\n{skill_catalog}\n{analysis_block}\n",
        "rule\r\n",
        {"z": {"description": "zé"}, "a": {"description": "{a}"}},
        "prefixed",
        True,
    ),
    (
        "nested_and_index",
        "{tool_specs[0]}{version:{max_ops}}|{skill_catalog}|{analysis_block}",
        "",
        {"t": {"description": "d"}},
        "prefixed",
        False,
    ),
    ("empty_tools_index", "{tool_specs[0]}{skill_catalog}", "", {}, "bundled", False),
    (
        "version_format",
        "{version:05d} {skill_catalog}",
        "r",
        {"t": {"description": "d"}},
        "bundled",
        False,
    ),
    ("raising_formatter", "{analysis_block}{skill_catalog}", "r", {}, "raises", False),
    ("list_formatter", "{analysis_block}", "r", {}, "returns_list", False),
    ("address", "{skill_catalog.upper}", "r", {}, "bundled", False),
    ("surrogate", "{analysis_block}|{skill_catalog}", "r", {}, "surrogate", False),
]


def _mutated_runs(runs: Path) -> None:
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

    small = SampleSpec(n_checkpoints=3, n_cards=3, emb_dim=3, episodes_per_batch=3, seed=9)
    generate_run(runs / "clean", small, run_index=0)
    for name, edit in [
        ("list_trigger", lambda c: c.__setitem__("trigger", ["a", "b"])),
        ("int_program", lambda c: c.__setitem__("program", 5)),
        ("no_card_id", lambda c: c.pop("card_id")),
        ("meta_list", lambda c: c.__setitem__("meta_info", [])),
        ("numeric_id", lambda c: c.__setitem__("card_id", 42)),
    ]:
        run = generate_run(runs / name, small, run_index=1)
        snap = run / "snapshots" / "skills_v1.json"
        lib = json.loads(snap.read_text("utf-8"))
        edit(lib["cards"][0])
        snap.write_text(json.dumps(lib, ensure_ascii=False), "utf-8")
    for name, version in [("version_float", 1.0), ("version_str", "1"), ("version_missing", None)]:
        run = generate_run(runs / name, small, run_index=2)
        snap = run / "snapshots" / "skills_v1.json"
        lib = json.loads(snap.read_text("utf-8"))
        if version is None:
            lib.pop("version")
        else:
            lib["version"] = version
        snap.write_text(json.dumps(lib, ensure_ascii=False), "utf-8")


def _sync_env(work: Path, runs: Path, config: tuple) -> dict[str, str]:
    import yaml

    name, template, rule, tools, fmt, as_files = config
    home = work / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(DAGSTER_HOME=str(home), STATEPOOL_RUNS_DIR=str(runs))
    env["STATEPOOL_STORE_DIR"] = str(work / "store")
    env["PYTHONPATH"] = os.pathsep.join([str(work), str(REPO)])
    module = f"prc_sync_{name}"
    source = [FORMATTERS[fmt] or ""]
    if FORMATTERS[fmt]:
        env["STATEPOOL_EPISODE_FORMATTER"] = f"{module}:fmt"
    if template is not None and as_files:
        (work / "t.txt").write_bytes(b"\xef\xbb\xbf" + template.encode("utf-8"))
        (work / "r.txt").write_bytes(rule.encode("utf-8"))
        (work / "s.yaml").write_text(yaml.safe_dump(tools, allow_unicode=True, sort_keys=False))
        env["STATEPOOL_PROMPT_TEMPLATE"] = str(work / "t.txt")
        env["STATEPOOL_PARAM_RULE"] = str(work / "r.txt")
        env["STATEPOOL_TOOL_SPECS"] = str(work / "s.yaml")
    elif template is not None:
        source += [f"T = {template!r}", f"R = {rule!r}", f"S = {tools!r}"]
        env["STATEPOOL_PROMPT_TEMPLATE"] = f"{module}:T"
        env["STATEPOOL_PARAM_RULE"] = f"{module}:R"
        env["STATEPOOL_TOOL_SPECS"] = f"{module}:S"
    (work / f"{module}.py").write_text("\n".join(source) + "\n", "utf-8")
    return env


def _store_outcomes(store: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Our prompts and our prompt rejects, by state id."""
    from statepool_dagster.readers import load_prompts

    prompts = load_prompts(store) if (store / "curator_prompts").exists() else None
    ours = {} if prompts is None else dict(zip(prompts["state_id"], prompts["prompt"], strict=True))
    rejected = {}
    for path in sorted((store / "rejects").glob("*.jsonl")):
        for line in path.read_text("utf-8").splitlines():
            row = json.loads(line)
            if row.get("source") == "prompts":
                rejected[row["error"].split(":", 1)[0]] = row["error"]
    return ours, rejected


def run_syncs(outdir: Path, count: int, seed: types.ModuleType, timeout: float) -> list[dict]:
    """``statepool sync`` per configuration, against the original on the states it collects."""
    from statepool_dagster.core.prompts.formatting import format_episodes

    findings = []
    runs = outdir / "sync_runs"
    _mutated_runs(runs)
    states = {}
    for run in sorted(runs.iterdir()):
        seed.collect_from_run(str(run), str(outdir / "sync_pool" / run.name))
    for path in sorted((outdir / "sync_pool").glob("*/*.json")):
        states[path.stem] = json.loads(path.read_text("utf-8"))
    defaults = REPO / "statepool_dagster/core/prompts/defaults"
    for config in SYNC_CONFIGS[:count]:
        name, template, rule, tools, fmt, as_files = config
        work = outdir / f"sync_{name}"
        work.mkdir(parents=True)
        env = _sync_env(work, runs, config)
        sys.path.insert(0, str(work))
        module = __import__(f"prc_sync_{name}")
        if template is None:
            template = (defaults / "curator_prompt.txt").read_text("utf-8")
            rule = (defaults / "param_rule.txt").read_text("utf-8")
            tools = json.loads((defaults / "tool_specs.json").read_text("utf-8"))
        if as_files:
            template, rule = as_source(template), as_source(rule)
        set_inference_side(template, rule, tools, getattr(module, "fmt", format_episodes))
        try:
            done = subprocess.run(
                [str(STATEPOOL), "sync", "--json"],
                env=env,
                cwd=work,
                capture_output=True,
                timeout=timeout * 30,
            )
        except subprocess.TimeoutExpired:
            findings.append(
                {"i": f"sync:{name}", "level": "FLAG", "why": "sync hangs", "classes": ["sync"]}
            )
            continue
        err = done.stderr.decode("utf-8", "replace")
        refused = done.returncode == 2 and err.startswith("statepool: ") and "Traceback" not in err
        if not refused and (done.returncode != 0 or "Traceback" in err):
            why = f"rc {done.returncode}: {err[-600:]}"
            findings.append({"i": f"sync:{name}", "level": "FLAG", "why": why, "classes": ["sync"]})
        ours, rejected = _store_outcomes(work / "store")
        for sid, state in states.items():
            if refused:
                result = {"outcome": "config_error", "error": err.strip()}
            elif sid in ours:
                result = {"outcome": "prompt", "prompt": ours[sid]}
            elif sid in rejected:
                result = {"outcome": "reject", "error": rejected[sid]}
            else:
                result = {"outcome": "crash", "error": "no prompt and no reject"}
            case = {"i": f"sync:{name}:{sid}", "classes": ["sync", name], "formatter": fmt}
            findings.append(judge(case, original_prompt(seed, state), result))
    return findings


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--syncs", type=int, default=len(SYNC_CONFIGS))
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    args = parser.parse_args()
    outdir = args.outdir.resolve()
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / "cases.json").exists():
        parser.error(f"{outdir} is not empty and holds no earlier round: choose another folder")
    shutil.rmtree(outdir, ignore_errors=True)  # an earlier round's
    outdir.mkdir(parents=True)
    seed = load_original()
    bases = base_states(outdir, seed)
    (outdir / "bases.json").write_text(json.dumps(bases, ensure_ascii=False), "utf-8")
    results = run_bulk(outdir, make_cases(args.cases, args.seed, bases), args.timeout)
    results += run_syncs(outdir, args.syncs, seed, args.timeout)
    with (outdir / "findings.jsonl").open("w", encoding="utf-8") as out:
        for r in results:
            out.write(json.dumps(r) + "\n")
    counts: dict[str, int] = {}
    for r in results:
        theirs = "prompt" if r.get("original") == "prompt" else "raises"
        key = f"{r['level']} ours={r.get('ours')} original={theirs}"
        counts[key] = counts.get(key, 0) + 1
        if r["level"] != "OK":
            why = r["why"][:300].encode("utf-8", "backslashreplace").decode("utf-8")
            print(r["level"], r["i"], why, r["classes"], r.get("formatter"))
    for key, n in sorted(counts.items()):
        print(f"{n:6d}  {key}")
    return min(100, sum(r["level"] == "FLAG" for r in results))


if __name__ == "__main__":
    sys.exit(main())
