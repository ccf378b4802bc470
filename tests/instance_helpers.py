"""Dagster instances for tests: the project's config, homes copied from one set up once, a run
materialized in process and its metadata read back."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from process_helpers import REPO


def instance_config() -> dict:
    """The project's instance config (``dagster.yaml``: its SQLite event log), as ``statepool``
    and the daemon use it."""
    import yaml

    return yaml.safe_load((REPO / "dagster.yaml").read_text())


# Dagster's capture of each step's stdout and stderr (a `tail` and a watcher process per step,
# a tenth of a second), which no test reads: off in the tests' in-process instances.
NO_COMPUTE_LOGS = {
    "module": "dagster._core.storage.noop_compute_log_manager",
    "class": "NoOpComputeLogManager",
}


def in_process_config() -> dict:
    """``instance_config()`` without the capture of the steps' output (``NO_COMPUTE_LOGS``)."""
    return {**instance_config(), "compute_logs": NO_COMPUTE_LOGS}


_EMPTY_HOMES: dict[str, Path] = {}  # this process's empty homes, made on first use


def empty_home(kind: str) -> Path:
    """An instance home Dagster set up once in this process, to copy: ``"test"`` as
    ``instance_for_test`` makes one, ``"cli"`` as ``statepool`` does (the project's
    ``dagster.yaml``). Dagster builds a new home's schema through dozens of migrations, a
    third of a second each time; a copy takes milliseconds and holds the same files.
    """
    if kind not in _EMPTY_HOMES:
        from dagster import DagsterInstance, instance_for_test

        home = Path(tempfile.mkdtemp(prefix=f"statepool-empty-{kind}-home-"))
        atexit.register(shutil.rmtree, home, True)
        if kind == "test":
            opened = instance_for_test(temp_dir=str(home), overrides=in_process_config())
        else:
            shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
            opened = DagsterInstance.from_config(str(home))
        with opened:
            pass
        _EMPTY_HOMES[kind] = home
    return _EMPTY_HOMES[kind]


def new_instance(home: Path):
    """``instance_for_test`` on a new SQLite instance home in ``home`` (a copy of
    ``empty_home("test")``), with the project's ``dagster.yaml`` (``in_process_config``)."""
    from dagster import instance_for_test

    home.mkdir(parents=True, exist_ok=True)
    assert not any(home.iterdir()), f"{home} is not empty: no new instance there"
    shutil.copytree(empty_home("test"), home, dirs_exist_ok=True)
    return instance_for_test(temp_dir=str(home), overrides=in_process_config())


def materialize_run(instance, run: str, raise_on_error: bool = True):
    """Register ``run`` if needed and run ``statepool_job`` for it in ``instance``."""
    from statepool_dagster.definitions import defs
    from statepool_dagster.defs.runs.partitions import RUNS

    if run not in instance.get_dynamic_partitions(RUNS):
        instance.add_dynamic_partitions(RUNS, [run])
    return (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key=run, raise_on_error=raise_on_error)
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
