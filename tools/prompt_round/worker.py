"""Both renderings of each case in a worker process; hangs killed; each pair judged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

from .generation import FORMATTERS
from .original import (
    ADDRESS,
    REPO,
    SURROGATE,
    as_source,
    load_original,
    original_prompt,
    set_inference_side,
)

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
    from statepool_dagster.core.prompts.render import build_curator_prompt
    from statepool_dagster.core.prompts.spec import PromptSpec
    from statepool_dagster.core.prompts.template import format_episodes
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
        cmd = [sys.executable, "-m", "tools.prompt_round", "--worker", str(cases_path), str(start)]
        proc = subprocess.Popen([*cmd, str(results_path), str(work)], cwd=REPO)
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
