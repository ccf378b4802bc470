"""What ``statepool sync`` and ``statepool status`` load: only what their answer needs.

An idle sync (nothing new or changed) and ``status`` read the instance and the runs
folder's listings; the definitions, Arrow and pandas are for building runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from helpers import cli_env

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
