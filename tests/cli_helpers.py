"""The `statepool` command as a subprocess: its environment, a run that must succeed, its JSON,
a sync from scratch, what it imports and its peak memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from instance_helpers import empty_home
from process_helpers import BIN, REPO
from store_helpers import store_pool

STATEPOOL = BIN / "statepool"  # the console script; with PYTHONPATH set it runs this checkout


def cli_env(workspace, home: Path, set_up: bool = True) -> dict[str, str]:
    """Environment for a ``statepool`` subprocess: its own DAGSTER_HOME, runs and store.

    A new ``home`` is set up already, with the project's ``dagster.yaml`` (see ``empty_home``);
    ``set_up=False`` leaves it an empty folder but for ``dagster.yaml``, for the tests of a
    command setting up a new home.
    """
    if set_up and not (home.is_dir() and any(home.iterdir())):
        shutil.copytree(empty_home("cli"), home, dirs_exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        STATEPOOL_RUNS_DIR=str(workspace.runs),
        STATEPOOL_STORE_DIR=str(workspace.store),
    )
    return env


def statepool(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the ``statepool`` command; it must succeed."""
    done = subprocess.run(
        [str(STATEPOOL), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def sync_json(env: dict[str, str], cwd: Path) -> dict:
    """``statepool sync --json``'s report."""
    return json.loads(statepool(env, cwd, "sync", "--json").stdout)


def local_sync(root: Path, spec) -> Path:
    """Sample runs for ``spec`` synced by a plain ``statepool sync`` on the default SQLite home.

    Returns the store. Sample runs are deterministic: it is the reference for other setups.
    """
    import yaml

    from statepool_dagster.demo.sample_runs import generate_runs

    reference = SimpleNamespace(runs=root / "runs", store=root / "store")
    generate_runs(reference.runs, spec)
    env = cli_env(reference, root / "home")
    assert "storage" not in yaml.safe_load((root / "home" / "dagster.yaml").read_text())
    report = sync_json(env, root)
    assert (report["new"], report["failed"]) == (spec.n_runs, 0)
    assert sorted(store_pool(reference.store)) == [f"run{i:03d}" for i in range(spec.n_runs)]
    return reference.store


def assert_files_only(argv: list[str]) -> None:
    """``statepool`` with ``argv`` succeeds in a fresh interpreter without importing Dagster."""
    code = (
        "import sys\n"
        "from statepool_dagster.cli.main import main\n"
        f"assert main({argv!r}) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'dagster')\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# The command in a child that reports its own high-water mark (VmHWM) as it exits: a
# forked child's ru_maxrss would include the test process's memory at the fork.
CHILD = """
import atexit, os, sys

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(os.environ["PEAK_FILE_FOR_TEST"], "w").write(line.split()[1])

atexit.register(peak)
from statepool_dagster.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def peak_rss_mb(env: dict[str, str], cwd: Path, *args: str) -> float:
    """The peak resident memory of one ``statepool`` command, in MB (it must succeed)."""
    report = cwd / "peak_kb"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        env={**env, "PEAK_FILE_FOR_TEST": str(report)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return int(report.read_text()) / 1024
