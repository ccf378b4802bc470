"""Sessions through the command line: ``statepool ingest`` as a subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.sessions.build import build_session

from helpers import BIN, cli_env


def _state(k: int) -> dict:
    return {
        "state_id": f"ext-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": []},
        "episodes": [],
        "analysis": {"summary": f"s{k}"},
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }


def test_ingest_seals_good_lines_and_names_bad_ones(workspace, tmp_path: Path) -> None:
    source = tmp_path / "states.jsonl"
    lines = [json.dumps(_state(0)), "{broken", json.dumps(_state(1)), json.dumps({"state_id": 1})]
    source.write_text("\n".join(lines) + "\n")
    sessions = tmp_path / "sessions"
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(sessions)}
    done = subprocess.run(
        [str(BIN / "statepool"), "ingest", str(source), "--session", "ext", "--policy-step", "7"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert f"{source} line 2: not valid JSON" in done.stderr
    assert f"{source} line 4: not a state" in done.stderr
    assert "ingested 2 states into session ext" in done.stdout
    segments = list_segments(sessions / "ext" / "segments")
    assert len(segments) == 1
    built = build_session(sessions, workspace.store, "ext", Settings().prompt_spec())
    assert (built.states, built.prompts, built.rejects, built.policy_steps) == (2, 2, 0, (7, 7))

    bad = subprocess.run(
        [str(BIN / "statepool"), "ingest", str(source), "--session", "../up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "invalid session name" in bad.stderr
