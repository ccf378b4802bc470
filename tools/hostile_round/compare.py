"""Both sides run: the original script per run, one statepool sync; their outputs compared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .registry import REPO, SEED, STATEPOOL


def run_original(runs: Path, name: str, work: Path, timeout: float) -> dict:
    """The original script over a folder holding only this run (a symlink to it)."""
    alone = work / "orig_in" / name
    alone.mkdir(parents=True)
    (alone / name).symlink_to(runs / name)
    out = work / "orig_out" / name
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(SEED), str(alone), str(out)],
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )
        rc, err = done.returncode, done.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        rc, err = "hang", ""
    states = {p.name: p.read_bytes() for p in out.glob("*.json")} if out.is_dir() else {}
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return {"rc": rc, "error": last, "states": states, "seconds": time.monotonic() - started}


def _first_bad_line_is_blank(episodes: Path) -> bool:
    """Whether the original's episode reading dies first on a blank line (documented)."""
    try:
        with open(episodes, encoding="utf-8") as f:
            for line in f:
                try:
                    json.loads(line)
                except ValueError:
                    return not line.strip(" \t\r\n")
    except (OSError, ValueError):
        return False
    return False


def run_original_without_blank_lines(runs: Path, name: str, work: Path, timeout: float):
    """The original on a copy whose blank lines are gone: where it crashed on one, the
    states it would write but for that (docs/input-rules.md: blank lines are skipped here)."""
    if not _first_bad_line_is_blank(runs / name / "episodes.jsonl"):
        return None
    copies = work / "no_blank"
    copy = copies / name
    shutil.copytree(runs / name, copy, symlinks=True)
    data = (copy / "episodes.jsonl").read_bytes()
    from statepool_dagster.core.runs.episodes import lines_with_ends

    kept = [ln for ln in lines_with_ends(data) if ln.strip(b" \t\r\n")]
    (copy / "episodes.jsonl").write_bytes(b"".join(kept))
    result = run_original(copies, name, work / "no_blank_work", timeout)
    return result


def run_ours(runs: Path, work: Path, timeout: float) -> dict:
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        STATEPOOL_RUNS_DIR=str(runs),
        STATEPOOL_STORE_DIR=str(work / "store"),
    )
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(STATEPOOL), "sync", "--json"],
            env=env,
            cwd=work,
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"rc": "hang", "report": None, "stderr": "", "seconds": timeout}
    stdout = done.stdout.decode("utf-8", "replace")
    try:
        report = json.loads(stdout)
    except ValueError:
        report = None
    return {
        "rc": done.returncode,
        "report": report,
        "stderr": done.stderr.decode("utf-8", "replace"),
        "seconds": time.monotonic() - started,
    }


def store_states(store: Path, run: str) -> dict[str, bytes]:
    d = store / "state_pool" / run
    if not d.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith(".")}


def store_rejects(store: Path, run: str) -> list[dict]:
    path = store / "rejects" / f"{run}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def compare(name: str, orig: dict, ours_run: dict | None, states: dict, rejects: list) -> list:
    """``[(level, message)]`` for one run; level FLAG (issue 14 broken) or NOTE (to review)."""
    out = []
    if ours_run is None:
        return [("FLAG", "run missing from the sync report")]
    if orig["rc"] == "hang":
        out.append(("NOTE", "the original hangs"))
    crashed = orig["rc"] != 0
    explained = bool(rejects) or bool(ours_run.get("ignored"))
    rej = "; ".join(f"{r['file']}:{r['line']} {r['error'][:70]}" for r in rejects[:3])
    for state in sorted(set(orig["states"]) | set(states)):
        mine, theirs = states.get(state), orig["states"].get(state)
        if mine == theirs:
            continue
        if theirs == b"" and crashed:
            if mine is not None:
                out.append(("NOTE", f"{state}: the original leaves it empty (crash while writing)"))
            continue
        level = "NOTE" if explained else "FLAG"
        what = "only ours" if theirs is None else "only the original" if mine is None else "differs"
        out.append((level, f"{state}: {what} (rejects: {rej or 'none'})"))
    if crashed and not explained:
        out.append(("FLAG", f"the original crashes ({orig['error'][:100]}), we reject nothing"))
    if crashed and explained:
        out.append(("NOTE", f"original crashes ({orig['error'][:80]}); ours: {rej}"))
    if not crashed and rejects:
        out.append(("NOTE", f"original succeeds; ours rejects: {rej}"))
    return out
