"""What the UI shows per partition, read back from a real instance after a batch sync and
after a run the sensor launched: four materializations with their metadata, every check's
result. On SQLite (the repo's dagster.yaml and its storage) and on PostgreSQL
(``deploy/postgres``, when ``STATEPOOL_TEST_PG_URL`` is set). And two syncs started
together build each partition once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, RunsFilter
from dagster._core.event_api import PartitionKeyFilter

from statepool_dagster.core import names
from statepool_dagster.defs.runs.checks import CHECK_SPECS, INPUTS_CLEAN
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env, sync_json
from process_helpers import REPO

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
BIN = Path(sys.executable).parent
CHECK_KEYS = [spec.key for spec in CHECK_SPECS]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, workspace, tmp_path):
    """``(env, instance)`` of a fresh instance on each storage."""
    if request.param == "sqlite":
        env = cli_env(workspace, tmp_path / "home")
        with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            assert type(instance.event_log_storage).__name__ == "StatepoolSqliteEventLogStorage"
            yield env, instance
    else:
        yield request.getfixturevalue("pg_env"), request.getfixturevalue("pg_instance")


def with_a_reject(workspace) -> None:
    """Sample runs, run001 with an unreadable episode line (its inputs_clean check fails)."""
    generate_runs(workspace.runs, SPEC)
    with open(workspace.run("run001") / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")


def assert_partition_records(instance: DagsterInstance, run: str) -> None:
    """Each run asset materialized once for ``run``, with its metadata; each check's result."""
    for asset in names.RUN_ASSETS:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[run]), limit=5
        ).records
        assert len(records) == 1, (asset, run, len(records))
        metadata = records[0].asset_materialization.metadata
        assert names.ROW_COUNT in metadata and names.FINGERPRINT in metadata, (asset, metadata)
    for key in CHECK_KEYS:
        history = instance.event_log_storage.get_asset_check_execution_history(
            key, limit=5, partition_filter=PartitionKeyFilter(key=run)
        )
        assert len(history) == 1, (key, run, history)
        evaluation = history[0].event.dagster_event.asset_check_evaluation_data
        assert evaluation.partition == run
        expected = not (key.name == INPUTS_CLEAN and run == "run001")
        assert evaluation.passed is expected, (key, run, evaluation)
        if key.name == INPUTS_CLEAN and run == "run001":  # says what is wrong, and where
            assert evaluation.description == "1 reject set aside"
            assert evaluation.metadata[names.REJECTS].value == 1
            assert "episodes.jsonl" in evaluation.metadata["details"].value


def test_batch_sync_records_every_partition(workspace, tmp_path, backend):
    env, instance = backend
    with_a_reject(workspace)
    report = sync_json(env, tmp_path)
    assert (report["new"], report["failed"]) == (3, 0)
    runs = instance.get_run_records(RunsFilter(job_name=names.JOB))
    assert len(runs) == 1  # one batch run for the three partitions
    for run in ("run000", "run001", "run002"):
        assert_partition_records(instance, run)


@pytest.mark.slow  # the real daemon
def test_sensor_launched_runs_record_every_partition(workspace, tmp_path, backend):
    env, instance = backend
    env = {**env, "STATEPOOL_SENSOR_INTERVAL": "2", "STATEPOOL_SETTLE_SECONDS": "1"}
    with open(tmp_path / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        with_a_reject(workspace)
        deadline = time.monotonic() + 180
        while True:
            runs = instance.get_run_records(RunsFilter(job_name=names.JOB))
            if len(runs) == 3 and all(r.dagster_run.is_finished for r in runs):
                break
            assert proc.poll() is None, "the daemon exited"
            assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-4000:]
            time.sleep(1)
    finally:
        import os
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert all(r.dagster_run.is_success for r in runs)
    for run in ("run000", "run001", "run002"):
        assert_partition_records(instance, run)


def test_two_syncs_started_together_build_each_partition_once(workspace, tmp_path):
    generate_runs(workspace.runs, SampleSpec(n_runs=20, n_checkpoints=2, n_cards=3, emb_dim=4))
    env = cli_env(workspace, tmp_path / "home", set_up=False)  # both set up the new home too
    command = [str(BIN / "statepool"), "sync", "--json"]
    procs = [
        subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    import json

    reports = [json.loads(out) for out in outputs]
    assert sum(r["states_written"] for r in reports) == 20 * 2
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        for asset in names.RUN_ASSETS:
            records = instance.fetch_materializations(AssetKey(asset), limit=100).records
            per_partition = sorted(r.partition_key for r in records)
            assert per_partition == sorted(f"run{i:03d}" for i in range(20)), asset
    # What one sync skipped, it says was built elsewhere.
    built = {run["run"] for r in reports for run in r["runs"] if run["states"]}
    assert len(built) == 20
