"""The instance on a real PostgreSQL server (deploy/postgres/dagster.yaml).

The server comes from ``STATEPOOL_TEST_PG_URL`` (a superuser URL such as
``postgresql://postgres@127.0.0.1:54329/postgres``; ``make pg-up`` starts a throwaway one).
Without it these tests skip, except under ``CI=true``, where they fail. Each test gets a
fresh database of its own, dropped afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from statepool_dagster.core.sample_runs import SampleSpec, generate_runs

from helpers import REPO, cli_env, store_pool

URL_VAR = "STATEPOOL_TEST_PG_URL"
CONFIG = REPO / "deploy" / "postgres" / "dagster.yaml"
SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
BIN = Path(sys.executable).parent
STATEPOOL = BIN / "statepool"
PARTITION = "dagster/partition"


def unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the PostgreSQL tests must run, not skip)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The superuser URL of a reachable PostgreSQL server."""
    url = os.environ.get(URL_VAR)
    if not url:
        unavailable(
            f"{URL_VAR} is not set: no PostgreSQL server to test against "
            "(e.g. `make pg-up`, then "
            f"{URL_VAR}=postgresql://postgres@127.0.0.1:54329/postgres)"
        )
    try:
        import dagster_postgres  # noqa: F401
        import psycopg2
        from sqlalchemy.engine import make_url
    except ImportError as error:
        unavailable(f"the `postgres` extra is missing ({error}): pip install -e '.[postgres]'")
    safe = make_url(url).render_as_string(hide_password=True)
    try:
        psycopg2.connect(url, connect_timeout=5).close()
    except psycopg2.Error as error:
        unavailable(f"PostgreSQL at {URL_VAR}={safe} is unreachable: {str(error).strip()}")
    return url


@pytest.fixture
def pg_url(pg_server: str):
    """A fresh, empty database on the server, dropped after the test."""
    import psycopg2
    from sqlalchemy.engine import make_url

    name = f"statepool_test_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(pg_server, connect_timeout=5)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield make_url(pg_server).set(database=name).render_as_string(hide_password=False)
        with admin.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        admin.close()


@pytest.fixture
def pg_env(workspace, tmp_path, pg_url, monkeypatch) -> dict[str, str]:
    """Environment for a subprocess on a DAGSTER_HOME holding deploy/postgres/dagster.yaml."""
    home = tmp_path / "pg_home"
    home.mkdir()
    shutil.copy(CONFIG, home / "dagster.yaml")
    env = cli_env(workspace, home)
    env["DAGSTER_PG_URL"] = pg_url
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url)  # for pg_instance, in this process
    return env


@pytest.fixture
def pg_instance(pg_env):
    """This process's view of the same Postgres-backed instance."""
    from dagster import DagsterInstance

    with DagsterInstance.from_config(pg_env["DAGSTER_HOME"]) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        yield instance


def statepool(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(STATEPOOL), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


def sync_json(env: dict[str, str], cwd: Path) -> dict:
    return json.loads(statepool(env, cwd, "sync", "--json").stdout)


@pytest.fixture(scope="session")
def sqlite_pool(pg_server, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """The state pool a plain ``statepool sync`` on the default SQLite home writes for SPEC.

    Sample runs are deterministic, so one reference serves every test.
    """
    root = tmp_path_factory.mktemp("sqlite_reference")
    reference = SimpleNamespace(runs=root / "runs", store=root / "store")
    generate_runs(reference.runs, SPEC)
    env = cli_env(reference, root / "home")
    assert "storage" not in yaml.safe_load((root / "home" / "dagster.yaml").read_text())
    report = sync_json(env, root)
    assert (report["new"], report["failed"]) == (SPEC.n_runs, 0)
    pool = store_pool(reference.store)
    assert sorted(pool) == [f"run{i:03d}" for i in range(SPEC.n_runs)]
    return pool


def partition_runs(instance, status=None) -> list:
    """Run records of ``statepool_job`` runs (one partition each), oldest first."""
    from dagster import RunsFilter

    records = instance.get_run_records(
        RunsFilter(job_name="statepool_job", statuses=[status] if status else [])
    )
    return sorted(
        (r for r in records if PARTITION in r.dagster_run.tags), key=lambda r: r.start_time or 0
    )


def start_daemon(env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_daemon(proc: subprocess.Popen) -> None:
    """Stop the daemon and the run workers it launched (its whole process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for(condition, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        tail = log.read_text(errors="replace")[-4000:]
        assert proc.poll() is None, f"the daemon exited:\n{tail}"
        assert time.monotonic() < deadline, f"not done after {timeout:.0f} s:\n{tail}"
        time.sleep(1)


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

    batch = pg_instance.get_run_records(RunsFilter(job_name="statepool_batch_job"))
    assert [r.dagster_run.status for r in batch] == [DagsterRunStatus.SUCCESS]
    materialized = pg_instance.get_materialized_partitions(AssetKey("curator_prompts"))
    assert materialized == {"run000", "run001"}

    second = sync_json(pg_env, tmp_path)
    assert (second["unchanged"], second["new"], second["changed"]) == (2, 0, 0)
    assert second["runs"] == []
    assert len(pg_instance.get_run_records(RunsFilter(job_name="statepool_batch_job"))) == 1


def test_daemon_sensor_on_postgres_materializes_dropped_in_runs(
    workspace, tmp_path, pg_env, pg_instance, sqlite_pool
):
    from dagster import DagsterRunStatus

    env = {**pg_env, "STATEPOOL_SENSOR_INTERVAL": "2", "STATEPOOL_SETTLE_SECONDS": "1"}
    log = tmp_path / "daemon.log"
    proc = start_daemon(env, log)
    try:
        generate_runs(workspace.runs, SPEC)

        def done() -> bool:
            runs = partition_runs(pg_instance)
            failed = [r for r in runs if r.dagster_run.status == DagsterRunStatus.FAILURE]
            assert not failed, f"run failed: {failed[0].dagster_run.run_id}"
            ok = {r.dagster_run.tags[PARTITION] for r in runs if r.dagster_run.is_success}
            return ok == {"run000", "run001"}

        wait_for(done, 150, proc, log)
    finally:
        stop_daemon(proc)
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
from statepool_dagster import defs

key, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
job = defs.resolve_job_def("statepool_job")
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
    proc = start_daemon(env, log)
    try:

        def done() -> bool:
            runs = partition_runs(pg_instance)
            failed = [r for r in runs if r.dagster_run.status == DagsterRunStatus.FAILURE]
            assert not failed, f"run failed: {failed[0].dagster_run.run_id}"
            return sum(r.dagster_run.is_success for r in runs) == 3

        wait_for(done, 180, proc, log)
    finally:
        stop_daemon(proc)
    runs = partition_runs(pg_instance)
    same = [r for r in runs if r.dagster_run.tags[PARTITION] == "run000"]
    assert len(same) == 2
    first, second = sorted(same, key=lambda r: r.start_time)
    assert first.end_time <= second.start_time, "two runs of run000 overlapped"
    assert store_pool(workspace.store) == sqlite_pool
