"""What ``statepool sync`` and ``statepool status`` load: only what their answer needs.

An idle sync (nothing new or changed) and ``status`` read the instance and the runs
folder's listings (``status`` also the sessions' and the feedback fold's indexes); the
definitions and Arrow are for building runs, and no sync loads pandas (the store's columns
are made from Arrow's buffers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
BUILDING = {"statepool_dagster.definitions", "pyarrow"}


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
    building = loaded(env, tmp_path, ["sync", "-q"])  # two new runs to build
    assert building >= BUILDING
    assert "pandas" not in building
    for argv in (["sync", "-q"], ["status", "--json"]):
        assert not {"pandas", *BUILDING} & loaded(env, tmp_path, argv), argv


PANDAS_NOTED = """
import os, sys
class Note:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":  # pyarrow asks quietly: note who asked, in any process
            with open(os.environ["PANDAS_ASKED"], "a") as f:
                f.write(f"{os.getpid()}\\n")
sys.meta_path.insert(0, Note())  # forked build workers inherit it
from statepool_dagster.cli.main import main
sys.exit(main(["sync", "--json"]))
"""


def test_a_sync_builds_runs_with_no_pandas_anywhere(workspace, tmp_path):
    generate_runs(workspace.runs, SPEC)
    asked = tmp_path / "pandas-asked.txt"
    env = {**cli_env(workspace, tmp_path / "home"), "PANDAS_ASKED": str(asked)}
    done = subprocess.run(
        [sys.executable, "-c", PANDAS_NOTED],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout[done.stdout.index("{") :])
    assert summary["failed"] == 0 and summary["states_written"] > 0
    assert not asked.exists(), "pandas was imported by a sync's process"
