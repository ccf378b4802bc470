"""The run assets' step records each run as its build returns, while the rest are built.

A real instance on the project's storage (the repo's dagster.yaml), the real Definitions, real
runs: every run's four materializations and its check results are recorded exactly once, in
order (a run's checks after its materializations, the runs in key order); a run built is
readable while a later one is still building, and no write lock is held meanwhile; a run
that also materializes an asset downstream of the run assets still runs it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    define_asset_job,
)
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from statepool_dagster.core import names
from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.checks import CHECK_SPECS
from statepool_dagster.defs.runs.partitions import RUNS
from statepool_dagster.defs.runs.recording import RECORD_AT_LEAST
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env

# More runs than one write takes, and two more: the last is held back in one test.
N_RUNS = RECORD_AT_LEAST + 2
SPEC = SampleSpec(n_runs=N_RUNS, n_checkpoints=2, n_cards=3, emb_dim=4, episodes_per_batch=2)
NAMES = [f"run{i:03d}" for i in range(SPEC.n_runs)]
CHECKS = {(spec.key.asset_key.to_user_string(), spec.key.name) for spec in CHECK_SPECS}
RECORDED = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION}

# The episode formatter, held at the last run's first prompt until GATE is removed.
GATED_FORMATTER = """
import os, time
from statepool_dagster.core.prompts.template import format_episodes

def gated(episodes):
    if episodes and str(episodes[0].get("id", "")).startswith(os.environ["SLOW_RUN"]):
        gate = os.environ["GATE"]
        open(gate + ".reached", "a").close()
        while os.path.exists(gate):
            time.sleep(0.05)
    return format_episodes(episodes)
"""


@pytest.fixture
def project_instance(workspace, tmp_path, monkeypatch):
    """An instance on the repo's dagster.yaml (the project's SQLite event log), runs registered."""
    env = cli_env(workspace, tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    generate_runs(workspace.runs, SPEC)
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert type(instance.event_log_storage).__name__ == "StatepoolSqliteEventLogStorage"
        instance.add_dynamic_partitions(RUNS, NAMES)
        yield instance


def run_all(instance, job_name: str = names.JOB, definitions=None):
    return (
        (definitions or defs())
        .resolve_job_def(job_name)
        .execute_in_process(
            instance=instance,
            tags={
                ASSET_PARTITION_RANGE_START_TAG: NAMES[0],
                ASSET_PARTITION_RANGE_END_TAG: NAMES[-1],
            },
            raise_on_error=False,
        )
    )


def recorded(instance, run_id: str) -> list[tuple[str, str, str]]:
    """``(kind, asset or asset/check, partition)`` of every event the run stored, in order."""
    found = []
    for entry in instance.all_logs(run_id, of_type=RECORDED):
        event = entry.get_dagster_event()
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            materialization = event.step_materialization_data.materialization
            found.append(("m", materialization.asset_key.to_user_string(), event.partition))
        else:
            evaluation = event.asset_check_evaluation_data
            name = f"{evaluation.asset_key.to_user_string()}/{evaluation.check_name}"
            found.append(("c", name, evaluation.partition))
    return found


def assert_each_run_recorded_once_in_order(events: list[tuple[str, str, str]]) -> None:
    expected_checks = sorted(f"{asset}/{name}" for asset, name in CHECKS)
    partitions = [partition for _, _, partition in events]
    # The runs one after the other, in key order, none split up or repeated.
    assert [p for i, p in enumerate(partitions) if i == 0 or partitions[i - 1] != p] == NAMES
    for run in NAMES:
        mine = [(kind, name) for kind, name, partition in events if partition == run]
        materialized = [name for kind, name in mine if kind == "m"]
        assert materialized == list(names.RUN_ASSETS), (run, mine)  # once each, in data order
        assert sorted(name for kind, name in mine if kind == "c") == expected_checks, (run, mine)
        assert [kind for kind, _ in mine] == ["m"] * 4 + ["c"] * len(CHECKS), (run, mine)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_each_run_is_recorded_once_in_order_with_its_checks_after(
    project_instance, monkeypatch, workers
):
    monkeypatch.setenv("STATEPOOL_WORKERS", workers)
    result = run_all(project_instance)
    assert result.success
    assert_each_run_recorded_once_in_order(recorded(project_instance, result.run_id))
    for asset in names.RUN_ASSETS:  # each asset's row: the last run's materialization
        records = project_instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset)), limit=100
        ).records
        assert sorted(r.partition_key for r in records) == NAMES
        [asset_record] = project_instance.get_asset_records([AssetKey(asset)])
        latest = asset_record.asset_entry.last_materialization_record
        assert latest.storage_id == max(r.storage_id for r in records)
        assert latest.event_log_entry.get_dagster_event().partition == NAMES[-1]
    for key in (spec.key for spec in CHECK_SPECS):  # each result after what it checks
        for run in NAMES:
            [execution] = project_instance.event_log_storage.get_asset_check_execution_history(
                key, limit=5, partition_filter=PartitionKeyFilter(key=run)
            )
            assert execution.status.value == "SUCCEEDED"
            [checked] = project_instance.fetch_materializations(
                AssetRecordsFilter(asset_key=key.asset_key, asset_partitions=[run]), limit=5
            ).records
            assert execution.event.timestamp >= checked.timestamp


def _index_writable(home: Path) -> bool:
    """Whether another connection can take the index shard's write lock at once."""
    conn = sqlite3.connect(home / "history" / "runs" / "index.db", timeout=0.5)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # database is locked
        return False
    finally:
        conn.close()


def test_a_built_run_is_readable_while_a_later_one_builds_and_no_write_lock_is_held(
    project_instance, workspace, tmp_path, monkeypatch
):
    formatter = tmp_path / "gated_fmt.py"
    formatter.write_text(GATED_FORMATTER, encoding="utf-8")
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("STATEPOOL_EPISODE_FORMATTER", f"{formatter}:gated")
    monkeypatch.setenv("SLOW_RUN", NAMES[-1])
    monkeypatch.setenv("GATE", str(gate))
    monkeypatch.setenv("STATEPOOL_WORKERS", "2")
    home = Path(os.environ["DAGSTER_HOME"])
    seen: dict[str, object] = {}

    def while_the_last_run_builds() -> None:
        try:
            deadline = time.monotonic() + 120
            while not Path(f"{gate}.reached").exists():
                assert time.monotonic() < deadline, "the last run's build never started"
                time.sleep(0.05)
            earlier = NAMES[:RECORD_AT_LEAST]
            while True:  # the runs before it, built meanwhile, are recorded while it waits
                done = {
                    r.partition_key
                    for r in project_instance.fetch_materializations(
                        AssetRecordsFilter(asset_key=AssetKey(names.FINAL_ASSET)), limit=100
                    ).records
                }
                if set(earlier) <= done or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            seen["done"] = done
            time.sleep(0.5)  # the step is waiting for the last build by now
            seen["writable"] = _index_writable(home)
        except BaseException as error:  # reported by the test's own thread
            seen["error"] = error
        finally:
            gate.unlink()

    watcher = threading.Thread(target=while_the_last_run_builds)
    watcher.start()
    try:
        result = run_all(project_instance)
    finally:
        watcher.join(timeout=180)
    assert "error" not in seen, seen.get("error")
    assert result.success
    # Recorded before the last was built: the first write's runs at least, never the last.
    assert set(NAMES[:RECORD_AT_LEAST]) <= seen["done"] <= set(NAMES[:-1])
    assert seen["writable"] is True  # no write lock held while waiting for a build
    assert_each_run_recorded_once_in_order(recorded(project_instance, result.run_id))


def test_a_run_with_an_asset_downstream_records_outputs_and_runs_it(
    project_instance, tmp_path, monkeypatch
):
    monkeypatch.setenv("STATEPOOL_SESSIONS_DIR", str(tmp_path / "sessions"))
    job = define_asset_job(
        "with_dataset",
        selection=AssetSelection.assets(*names.RUN_ASSETS, "training_dataset"),
    )
    merged = Definitions.merge(defs(), Definitions(jobs=[job]))
    result = run_all(project_instance, "with_dataset", merged)
    assert result.success
    succeeded = {e.step_key for e in result.all_events if e.is_step_success}
    assert succeeded == {"run_assets", "training_dataset"}
    events = [e for e in recorded(project_instance, result.run_id) if e[2] is not None]
    materialized = sorted((name, partition) for kind, name, partition in events if kind == "m")
    assert materialized == sorted((a, r) for a in names.RUN_ASSETS for r in NAMES)
    for run in NAMES:  # every check result after every materialization of its run
        kinds = [kind for kind, _, partition in events if partition == run]
        assert kinds.count("c") == len(CHECKS)
    last_materialization = max(i for i, e in enumerate(events) if e[0] == "m")
    assert all(e[0] == "c" for e in events[last_materialization + 1 :])
    assert len(events) == len(NAMES) * (4 + len(CHECKS))


def test_training_dataset_shows_unsynced_once_a_run_it_read_is_built_again(
    project_instance, tmp_path, monkeypatch
):
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._time import get_current_datetime

    monkeypatch.setenv("STATEPOOL_SESSIONS_DIR", str(tmp_path / "sessions"))
    dataset = define_asset_job("dataset_alone", selection=AssetSelection.assets("training_dataset"))
    merged = Definitions.merge(defs(), Definitions(jobs=[dataset]))
    assert run_all(project_instance).success  # every run recorded as built, not through outputs
    assert (
        merged.resolve_job_def("dataset_alone")
        .execute_in_process(instance=project_instance)
        .success
    )

    def status() -> StaleStatus:  # as the UI's asset page asks it
        graph = merged.resolve_asset_graph()
        view = AssetGraphView(
            temporal_context=TemporalContext(
                effective_dt=get_current_datetime(), last_event_id=None
            ),
            instance=project_instance,
            asset_graph=graph,
        )
        resolver = CachingStaleStatusResolver(project_instance, graph, view)
        return resolver.get_status(AssetKey("training_dataset"))

    assert status() == StaleStatus.FRESH
    job = merged.resolve_job_def(names.JOB)
    assert job.execute_in_process(instance=project_instance, partition_key=NAMES[0]).success
    # The run's new materializations carry a new data version: what training_dataset read is old.
    assert status() == StaleStatus.STALE
