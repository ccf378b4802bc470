"""Plain helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType


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


def cli_env(workspace, home: Path) -> dict[str, str]:
    """Environment for a ``statepool`` subprocess: its own DAGSTER_HOME, runs and store."""
    import os

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


def materialize_run(instance, run: str, raise_on_error: bool = True):
    """Register ``run`` if needed and run ``statepool_job`` for it in ``instance``."""
    from statepool_dagster import defs
    from statepool_dagster.partitions import RUNS

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
