"""The instance on a real PostgreSQL server (deploy/postgres/dagster.yaml).

The server comes from ``STATEPOOL_TEST_PG_URL`` (a superuser URL such as
``postgresql://postgres@127.0.0.1:54329/postgres``; ``make pg-up`` starts a throwaway one).
Without it these tests skip, except under ``CI=true``, where they fail. Each test gets a
fresh database of its own, dropped afterwards (fixtures ``pg_env`` and ``pg_instance``, in
conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import local_sync, sync_json
from process_helpers import REPO, daemon, wait_until
from store_helpers import store_pool

pytestmark = pytest.mark.slow  # daemons and many processes on a PostgreSQL server

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
BIN = Path(sys.executable).parent
PARTITION = "dagster/partition"


@pytest.fixture(scope="session")
def sqlite_pool(pg_server, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """The state pool a plain ``statepool sync`` on the default SQLite home writes for SPEC.

    Sample runs are deterministic, so one reference serves every test.
    """
    return store_pool(local_sync(tmp_path_factory.mktemp("sqlite_reference"), SPEC))


def partition_runs(instance, status=None) -> list:
    """Run records of ``statepool_job`` runs (one partition each), oldest first."""
    from dagster import RunsFilter

    records = instance.get_run_records(
        RunsFilter(job_name="statepool_job", statuses=[status] if status else [])
    )
    return sorted(
        (r for r in records if PARTITION in r.dagster_run.tags), key=lambda r: r.start_time or 0
    )


def test_sync_on_postgres_matches_sqlite_and_second_sync_does_nothing(
    workspace, tmp_path, pg_env, pg_instance, sqlite_pool
):
    from dagster import DagsterRunStatus

    generate_runs(workspace.runs, SPEC)
    first = sync_json(pg_env, tmp_path)
    assert (first["seen"], first["new"], first["failed"]) == (2, 2, 0)
    assert first["states_written"] == SPEC.n_runs * SPEC.n_checkpoints
    assert store_pool(workspace.store) == sqlite_pool

    # The runs, partitions and materializations live in PostgreSQL.
    assert sorted(pg_instance.get_dynamic_partitions("runs")) == ["run000", "run001"]
    # sync builds consecutive runs in one batch run: one successful run, both partitions.
    from dagster import AssetKey, RunsFilter

    batch = pg_instance.get_run_records(RunsFilter(job_name="statepool_job"))
    assert [r.dagster_run.status for r in batch] == [DagsterRunStatus.SUCCESS]
    assert "dagster/asset_partition_range_start" in batch[0].dagster_run.tags
    materialized = pg_instance.get_materialized_partitions(AssetKey("curator_prompts"))
    assert materialized == {"run000", "run001"}

    second = sync_json(pg_env, tmp_path)
    assert (second["unchanged"], second["new"], second["changed"]) == (2, 0, 0)
    assert second["runs"] == []
    assert len(pg_instance.get_run_records(RunsFilter(job_name="statepool_job"))) == 1


def test_daemon_sensor_on_postgres_materializes_dropped_in_runs(
    workspace, tmp_path, pg_env, pg_instance, sqlite_pool
):
    from dagster import DagsterRunStatus

    env = {**pg_env, "STATEPOOL_SENSOR_INTERVAL": "2", "STATEPOOL_SETTLE_SECONDS": "1"}
    log = tmp_path / "daemon.log"
    with daemon(env, log) as proc:
        generate_runs(workspace.runs, SPEC)

        def done() -> bool:
            runs = partition_runs(pg_instance)
            failed = [r for r in runs if r.dagster_run.status == DagsterRunStatus.FAILURE]
            assert not failed, f"run failed: {failed[0].dagster_run.run_id}"
            ok = {r.dagster_run.tags[PARTITION] for r in runs if r.dagster_run.is_success}
            return ok == {"run000", "run001"}

        wait_until(done, 150, proc, log)
    assert store_pool(workspace.store) == sqlite_pool
    # The sensor recorded its fingerprints: a sync on the same instance finds nothing to do.
    report = sync_json(pg_env, tmp_path)
    assert (report["unchanged"], report["runs"]) == (2, [])


# Each worker: wait for the start signal, then materialize one partition in the shared instance.
WORKER = """
import sys, time
from pathlib import Path
from types import SimpleNamespace
from dagster import DagsterInstance
from statepool_dagster.definitions import defs

key, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
job = defs().resolve_job_def("statepool_job")
with DagsterInstance.get() as instance:
    ready.touch()
    while not go.exists():
        time.sleep(0.01)
    started = time.time()
    result = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
    print(f"{started} {time.time()}")
sys.exit(0 if result.success else 1)
"""


def test_concurrent_runs_of_different_partitions(
    workspace, tmp_path, pg_env, pg_instance, sqlite_pool
):
    from dagster import DagsterRunStatus

    generate_runs(workspace.runs, SPEC)
    keys = ["run000", "run001"]
    pg_instance.add_dynamic_partitions("runs", keys)
    go = tmp_path / "go"
    workers = {
        key: subprocess.Popen(
            [sys.executable, "-c", WORKER, key, str(tmp_path / f"{key}.ready"), str(go)],
            env=pg_env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key in keys
    }
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"{key}.ready").exists() for key in keys):
            assert all(w.poll() is None for w in workers.values()), "a worker exited early"
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        go.touch()
        outputs = {key: w.communicate(timeout=300) for key, w in workers.items()}
    finally:
        for w in workers.values():
            if w.poll() is None:
                w.kill()
                w.wait()
    for key, (_, err) in outputs.items():
        assert workers[key].returncode == 0, f"{key} failed:\n{err[-4000:]}"
    windows = [tuple(map(float, out.split())) for out, _ in outputs.values()]
    assert max(w[0] for w in windows) < min(w[1] for w in windows), "the runs did not overlap"

    done = partition_runs(pg_instance, DagsterRunStatus.SUCCESS)
    assert sorted(r.dagster_run.tags[PARTITION] for r in done) == keys
    assert store_pool(workspace.store) == sqlite_pool


def test_run_queue_on_postgres_runs_one_partition_at_a_time(
    workspace, tmp_path, pg_env, pg_instance, sqlite_pool
):
    """Queued through the daemon: both run000 runs and run001 succeed, run000's never overlap."""
    from dagster import DagsterRunStatus

    generate_runs(workspace.runs, SPEC)
    pg_instance.add_dynamic_partitions("runs", ["run000", "run001"])
    # A long settle time keeps the sensor from requesting runs of its own.
    env = {**pg_env, "STATEPOOL_SENSOR_INTERVAL": "2", "STATEPOOL_SETTLE_SECONDS": "100000"}
    launch = [str(BIN / "dagster"), "job", "launch", "-w", str(REPO / "workspace.yaml")]
    launches = [
        subprocess.Popen(
            [*launch, "-j", "statepool_job", "--tags", json.dumps({PARTITION: key})],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key in ("run000", "run000", "run001")
    ]
    for p in launches:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
    queued = partition_runs(pg_instance, DagsterRunStatus.QUEUED)
    assert len(queued) == 3

    log = tmp_path / "daemon.log"
    with daemon(env, log) as proc:

        def done() -> bool:
            runs = partition_runs(pg_instance)
            failed = [r for r in runs if r.dagster_run.status == DagsterRunStatus.FAILURE]
            assert not failed, f"run failed: {failed[0].dagster_run.run_id}"
            return sum(r.dagster_run.is_success for r in runs) == 3

        wait_until(done, 180, proc, log)
    runs = partition_runs(pg_instance)
    same = [r for r in runs if r.dagster_run.tags[PARTITION] == "run000"]
    assert len(same) == 2
    first, second = sorted(same, key=lambda r: r.start_time)
    assert first.end_time <= second.start_time, "two runs of run000 overlapped"
    assert store_pool(workspace.store) == sqlite_pool
