"""A sync killed with SIGKILL at any moment leaves a readable store; the next sync completes."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env
from store_helpers import seed_pool, store_pool

pytestmark = pytest.mark.slow  # many syncs, each killed

SPEC = SampleSpec(n_runs=4, n_checkpoints=12, n_cards=40, emb_dim=256, episodes_per_batch=8)
STATEPOOL = Path(sys.executable).with_name("statepool")
KILL_AFTER = (0.8, 1.6, 2.4, 3.2, 4.0)
# The first tables of Dagster's event log setup, as its schema declares them (no stamp yet).
SOME_TABLES = [
    "CREATE TABLE event_logs (id INTEGER PRIMARY KEY, run_id VARCHAR(255), event TEXT NOT NULL,"
    " dagster_event_type TEXT, timestamp DATETIME, step_key TEXT, asset_key TEXT,"
    " partition TEXT)",
    "CREATE TABLE secondary_indexes (id INTEGER PRIMARY KEY, name VARCHAR UNIQUE,"
    " create_timestamp DATETIME, migration_completed DATETIME)",
]


def assert_store_readable(store: Path) -> None:
    """Every visible file is whole: Parquet opens, JSON parses, JSONL parses line by line."""
    for path in store.rglob("*"):
        if any(part.startswith(".") for part in path.relative_to(store).parts):
            continue  # temp files and locks are hidden and never read
        if path.suffix == ".parquet":
            pq.read_table(path)
        elif path.suffix == ".json":
            json.loads(path.read_bytes())
        elif path.suffix == ".jsonl":
            for line in path.read_text(encoding="utf-8").splitlines():
                json.loads(line)


def test_sync_killed_mid_run_leaves_nothing_torn(workspace, tmp_path, seed):
    generate_runs(workspace.runs, SPEC)
    env = cli_env(workspace, tmp_path / "home", set_up=False)  # a kill may catch its setup
    for delay in KILL_AFTER:
        proc = subprocess.Popen(
            [str(STATEPOOL), "sync", "-q"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert_store_readable(workspace.store)
        # Touch one run so every round has work even after an earlier round finished it.
        episodes = workspace.run("run000") / "episodes.jsonl"
        episodes.write_bytes(episodes.read_bytes())
    done = sync(env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert_store_readable(workspace.store)
    assert store_pool(workspace.store) == seed_pool(seed, workspace.runs, tmp_path / "seed")
    assert json.loads(sync(env, tmp_path).stdout)["unchanged"] == SPEC.n_runs
    # The killed syncs' runs were marked failed, so none holds a run-queue slot.
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster._core.instance.ref import InstanceRef

    with DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"])) as instance:
        unfinished = instance.get_runs(
            RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING])
        )
        assert unfinished == []


@pytest.mark.parametrize("tables", [0, 2], ids=["empty", "some-tables"])
def test_sync_finishes_an_instance_killed_while_being_created(workspace, tmp_path, tables):
    """A command killed in its first second can leave Dagster's event log index.db half made.

    Dagster only creates that file's tables when the file is new, so without repair every later
    command failed with "requires the dynamic partitions table". (Found by the kill test above.)
    """
    generate_runs(workspace.runs, SampleSpec(n_runs=2, n_checkpoints=3, n_cards=5, emb_dim=8))
    env = cli_env(workspace, tmp_path / "home", set_up=False)
    index = Path(env["DAGSTER_HOME"]) / "history" / "runs" / "index.db"
    index.parent.mkdir(parents=True)
    # What a SIGKILL leaves: the new file alone, or the first tables of the setup, unstamped.
    with contextlib.closing(sqlite3.connect(index)) as db:
        db.executescript(";".join(SOME_TABLES[:tables]))
    done = sync(env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["new"] == 2
    assert json.loads(sync(env, tmp_path).stdout)["unchanged"] == 2


def sync(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(STATEPOOL), "sync", "--json"], env=env, cwd=cwd, capture_output=True, text=True
    )
