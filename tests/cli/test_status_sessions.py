"""``statepool status`` (text and ``--json``) on sessions and the feedback fold, as a subprocess.

Sessions are written by ``statepool ingest`` and built by ``statepool sync``; feedback is
imported and folded by ``statepool feedback``; ``state_stats`` is materialized by its job on
the same instance the command line uses.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from dagster import DagsterInstance

from statepool_dagster.core.names import SESSIONS_JOB
from statepool_dagster.definitions import defs

from cli_helpers import STATEPOOL, cli_env


def _state(k: int) -> str:
    return json.dumps(
        {
            "state_id": f"ext-{k}",
            "dataset": "ovo",
            "lib_snapshot": {"version": k, "cards": []},
            "episodes": [],
            "analysis": {"summary": f"s{k}"},
            "last_receipt": "r",
            "followup_qids": [],
            "gt_map": {},
        }
    )


def _run(env: dict, cwd: Path, *args: str, code: int = 0) -> str:
    done = subprocess.run(
        [str(STATEPOOL), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout


def _status(env: dict, cwd: Path) -> dict:
    return json.loads(_run(env, cwd, "status", "--json"))


def _ingest(env: dict, tmp_path: Path, writer: str, lines: list[str], code: int = 0) -> None:
    source = tmp_path / f"{writer}.jsonl"
    source.write_text("\n".join(lines) + "\n")
    args = ("ingest", str(source), "--session", "ext", "--writer", writer, "--policy-step", "7")
    _run(env, tmp_path, *args, code=code)


def test_status_lists_sessions_states_segments_writers_rejects_and_seal(workspace, tmp_path):
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(tmp_path / "s")}
    workspace.store.mkdir()
    _ingest(env, tmp_path, "w1", [_state(0), "{broken", _state(1), "[1]"], code=1)
    [before] = _status(env, tmp_path)["sessions"]
    assert before["session"] == "ext" and before["status"] == "never"
    assert (before["segments"], before["segments_pending"], before["rejects"]) == (0, 1, 2)
    assert before["last_seal"] and before["last_materialized"] is None

    _run(env, tmp_path, "sync", "-q")
    status = _status(env, tmp_path)
    assert status["runs"] == []
    [built] = status["sessions"]
    assert {k: built[k] for k in ("status", "states", "copies", "segments", "writers")} == {
        "status": "materialized",
        "states": 2,
        "copies": 2,
        "segments": 1,
        "writers": ["w1"],
    }
    assert (built["rejects"], built["policy_steps"], built["segments_pending"]) == (2, [7, 7], 0)
    assert built["last_materialized"] and built["folder_on_disk"]

    # A second writer seals a segment with one more bad line: new, not yet built.
    _ingest(env, tmp_path, "w2", [_state(2), "nope"], code=1)
    [grown] = _status(env, tmp_path)["sessions"]
    assert (grown["status"], grown["segments_pending"], grown["rejects"]) == ("stale", 1, 3)
    text = _run(env, tmp_path, "status").splitlines()
    header = next(line for line in text if line.startswith("session"))
    assert header.split()[:8] == [
        "session", "status", "states", "segments", "waiting", "writers", "rejects", "last",
    ]  # fmt: skip
    row = next(line for line in text if line.startswith("ext "))
    assert row.split()[:7] == ["ext", "stale", "2", "1", "1", "1", "3"]

    # Its next build fails (a full disk, a bad setting): failed until a build succeeds.
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        job = defs().resolve_job_def(SESSIONS_JOB)
        instance.report_run_failed(
            instance.create_run_for_job(job, tags={"dagster/partition": "ext"})
        )
    assert _status(env, tmp_path)["sessions"][0]["status"] == "failed"


def test_status_counts_reject_files_with_or_without_a_leading_dot(workspace, tmp_path):
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(tmp_path / "s")}
    workspace.store.mkdir()
    _ingest(env, tmp_path, "w1", [_state(0), "{broken", "[1]"], code=1)
    folder = workspace.store / "session_rejects" / "ext"
    [kept] = [p for p in folder.iterdir() if p.name.endswith(".jsonl")]
    assert _status(env, tmp_path)["sessions"][0]["rejects"] == 2
    kept.rename(folder / kept.name.lstrip("."))  # the visible name the store moves to
    (folder / f".{kept.name}.tmp-0a1b2c").write_text("half written\n")  # a write under way
    assert _status(env, tmp_path)["sessions"][0]["rejects"] == 2


def _dump(folder: Path, step: int, scores: list[float]) -> None:
    folder.mkdir(exist_ok=True)
    rows = [
        {"input": "p", "output": "o", "gts": "[]", "score": s, "state_id": "s1", "step": step}
        for s in scores
    ]
    (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_status_shows_the_feedback_fold_and_whether_state_stats_is_materialized(
    workspace, tmp_path
):
    env = cli_env(workspace, tmp_path / "home")
    workspace.store.mkdir()
    empty = _status(env, tmp_path)["feedback"]
    assert (empty["states"], empty["records"], empty["last_fold"]) == (0, 0, None)
    assert empty["state_stats"] == "never"

    dump = tmp_path / "dump"
    _dump(dump, 2, [1.0, 0.5])
    _run(env, tmp_path, "feedback", "--from-verl-dump", str(dump))
    waiting = _status(env, tmp_path)["feedback"]
    assert (waiting["segments_folded"], waiting["segments_waiting"]) == (0, 1)

    _run(env, tmp_path, "feedback", "--fold")
    folded = _status(env, tmp_path)["feedback"]
    assert (folded["states"], folded["records"], folded["segments_folded"]) == (1, 2, 1)
    assert folded["segments_waiting"] == 0 and folded["last_fold"]
    assert folded["feedback"] == str(workspace.store / "feedback")

    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        job = defs().resolve_job_def("state_stats_job")
        assert job.execute_in_process(instance=instance).success
    done = _status(env, tmp_path)["feedback"]
    assert (done["state_stats"], done["records"]) == ("materialized", 2)
    assert done["last_materialized"]

    _dump(dump, 3, [0.0])
    _run(env, tmp_path, "feedback", "--from-verl-dump", str(dump))
    text = _run(env, tmp_path, "status")
    assert "  segments folded         1, 1 waiting" in text
    assert "  state_stats             stale, " in text
    assert "  records folded          2 (bad lines: 0)" in text
