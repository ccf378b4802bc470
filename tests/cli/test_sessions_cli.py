"""Sessions through the command line: ``statepool ingest`` as a subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.core.report import write_report
from statepool_dagster.core.report.extras import session_rows
from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session, session_totals

from cli_helpers import cli_env
from process_helpers import BIN


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
    # The bad lines in a visible file of the session's rejects, each naming file and line;
    # the session's totals (the report's and the UI's) count them.
    kept = sorted((workspace.store / "session_rejects" / "ext").iterdir())
    assert [p.name for p in kept if not p.name.startswith(".")] == [p.name for p in kept]
    records = [json.loads(line) for p in kept for line in p.read_text().splitlines()]
    assert [(r["file"], r["line"], r["source"]) for r in records] == [
        (str(source), 2, "ingest"),
        (str(source), 4, "ingest"),
    ]
    built = build_session(sessions, workspace.store, "ext", Settings().prompt_spec())
    assert (built.states, built.prompts, built.rejects, built.policy_steps) == (2, 2, 2, (7, 7))
    assert session_rows(workspace.store)[0].rejects == 2
    page = write_report(workspace.store).read_text(encoding="utf-8")
    assert '<span class="bad">2</span>' in page

    bad = subprocess.run(
        [str(BIN / "statepool"), "ingest", str(source), "--session", "../up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "invalid session name" in bad.stderr


def test_an_old_hidden_ingest_rejects_file_is_counted_then_shown(workspace, tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    spec = Settings().prompt_spec()
    with StateWriter(sessions, "old", writer="w0") as writer:
        writer.append(_state(0), policy_step=1)
    build_session(sessions, workspace.store, "old", spec)
    folder = workspace.store / "session_rejects" / "old"
    folder.mkdir(parents=True, exist_ok=True)  # a clean session has no rejects folder
    old = folder / ".ingest-ingest-host-7.jsonl"
    old.write_text('{"file": "a.jsonl", "line": 3, "error": "x", "raw": null}\n')
    assert session_totals(workspace.store, "old").rejects == 1
    built = build_session(sessions, workspace.store, "old", spec)
    assert built.rejects == 1 and not old.exists()
    assert [p.name for p in folder.iterdir()] == ["ingest-host-7.ingest.jsonl"]
    assert built.reject_details == [
        "session_rejects/old/ingest-host-7.ingest.jsonl: 1 line statepool ingest could not read"
    ]
