"""The product: ``statepool sync`` under some configurations, its prompts and rejects judged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

from .generation import FORMATTERS
from .original import REPO, STATEPOOL, as_source, original_prompt, set_inference_side
from .worker import judge

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
    from statepool_dagster.core.prompts.template import format_episodes

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
