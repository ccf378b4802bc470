"""Paths, placeholder names, and the original script with a fake inference side."""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
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
