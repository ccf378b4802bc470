"""Seeded templates, rules, tool specs, formatters and mutated states: the cases."""

from __future__ import annotations

import json
import random
import types
from pathlib import Path
from typing import Any

from .original import NAMES, REPO

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
    "reexport": "from statepool_dagster.core.prompts.template import format_episodes as fmt\n",
    "prefixed": (
        "from statepool_dagster.core.prompts.template import format_episodes as _b\n"
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
