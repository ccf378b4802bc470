"""Plain helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import NoReturn

import pytest


def seed_pool(seed: ModuleType, runs: Path, out: Path) -> dict[str, dict[str, bytes]]:
    """What the original script writes for each run: ``{run: {file name: bytes}}``."""
    pools: dict[str, dict[str, bytes]] = {}
    for run_dir in sorted(p for p in runs.iterdir() if (p / "episodes.jsonl").is_file()):
        target = out / run_dir.name
        seed.collect_from_run(str(run_dir), str(target))
        pools[run_dir.name] = {p.name: p.read_bytes() for p in target.glob("*.json")}
        shutil.rmtree(target)
    return pools


def store_pool(store: Path) -> dict[str, dict[str, bytes]]:
    """The state-pool files in our store: ``{run: {file name: bytes}}``."""
    root = store / "state_pool"
    if not root.is_dir():
        return {}
    return {
        d.name: {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith(".")}
        for d in root.iterdir()
        if d.is_dir() and not d.name.startswith(".")
    }


REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def unavailable(reason: str, needs: str) -> NoReturn:
    """Skip a test that lacks ``needs`` (a server, an extra); under ``CI=true``, fail it."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the tests needing {needs} must run, not skip)")
    pytest.skip(reason)


def cli_env(workspace, home: Path) -> dict[str, str]:
    """Environment for a ``statepool`` subprocess: its own DAGSTER_HOME, runs and store."""
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
        [str(BIN / "statepool"), *args],
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


def materialize_run(instance, run: str, raise_on_error: bool = True):
    """Register ``run`` if needed and run ``statepool_job`` for it in ``instance``."""
    from statepool_dagster.definitions import defs
    from statepool_dagster.defs.partitions import RUNS

    if run not in instance.get_dynamic_partitions(RUNS):
        instance.add_dynamic_partitions(RUNS, [run])
    return defs.resolve_job_def("statepool_job").execute_in_process(
        instance=instance, partition_key=run, raise_on_error=raise_on_error
    )


def latest_metadata(instance, asset: str, run: str | None = None) -> dict:
    """The metadata values of ``asset``'s latest materialization (of partition ``run``)."""
    from dagster import AssetKey, AssetRecordsFilter

    records = instance.fetch_materializations(
        AssetRecordsFilter(
            asset_key=AssetKey(asset), asset_partitions=None if run is None else [run]
        ),
        limit=1,
    ).records
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}
