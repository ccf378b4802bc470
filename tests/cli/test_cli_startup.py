"""What ``statepool sync`` and ``statepool status`` load: only what their answer needs.

An idle sync (nothing new or changed) and ``status`` read the instance and the runs
folder's listings (``status`` also the sessions' and the feedback fold's indexes); the
definitions, Arrow and pandas are for building runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
BUILDING = {"statepool_dagster.definitions", "pyarrow", "pandas"}


def loaded(env: dict[str, str], cwd: Path, argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after ``statepool <argv>`` succeeded."""
    code = (
        "import json, sys\n"
        "from statepool_dagster.cli.main import main\n"
        f"code = main({argv!r})\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    code, modules = json.loads(done.stdout.splitlines()[-1])
    assert code == 0
    return set(modules)


def test_idle_sync_and_status_load_neither_the_definitions_nor_arrow(workspace, tmp_path):
    generate_runs(workspace.runs, SPEC)
    env = cli_env(workspace, tmp_path / "home")
    assert loaded(env, tmp_path, ["sync", "-q"]) >= BUILDING  # two new runs to build
    for argv in (["sync", "-q"], ["status", "--json"]):
        assert not BUILDING & loaded(env, tmp_path, argv), argv


def test_status_of_sessions_and_feedback_reads_indexes_not_arrow(workspace, tmp_path):
    from statepool_dagster.core.config import Settings
    from statepool_dagster.core.feedback.stats_store import update_stats
    from statepool_dagster.core.segments import SegmentWriter
    from statepool_dagster.core.sessions.build import build_session
    from statepool_dagster.core.sessions.writer import StateWriter

    state = {"state_id": "s1", "dataset": "ovo", "lib_snapshot": {"version": 1, "cards": []},
             "episodes": [], "analysis": {}, "last_receipt": "r"}  # fmt: skip
    sessions = tmp_path / "sessions"
    with StateWriter(sessions, "grpo", writer="w0") as writer:
        writer.append(state, policy_step=1)
    build_session(sessions, workspace.store, "grpo", Settings().prompt_spec())
    with SegmentWriter(workspace.store / "feedback", "w") as feedback:
        feedback.append(
            {"state_id": "s1", "score": 1.0, "group": "g", "time": 1.0, "source": "trl"}
        )
    assert update_stats(workspace.store, workspace.store / "feedback").table.num_rows == 1
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(sessions)}
    assert not BUILDING & loaded(env, tmp_path, ["status", "--json"])
