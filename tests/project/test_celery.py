"""Celery execution (``STATEPOOL_EXECUTOR=celery``, deploy/celery/) on real servers and workers.

Two Celery workers (``deploy/celery/workers.sh``, each its own process group) share a
PostgreSQL instance (``STATEPOOL_TEST_PG_URL``, as in tests/project/test_postgres.py) and a Redis
broker: ``STATEPOOL_TEST_REDIS_URL`` (its database is flushed), or else a throwaway
``redis-server`` started here with ``deploy/celery/redis.sh``. Without them the tests skip,
except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import local_sync, sync_json
from process_helpers import (
    BIN,
    REPO,
    daemon,
    free_port,
    start_group,
    stop_group,
    unavailable,
    wait_until,
)
from store_helpers import store_pool

pytestmark = pytest.mark.slow  # Redis, Celery workers, a daemon

REDIS_URL_VAR = "STATEPOOL_TEST_REDIS_URL"
NEEDS = "Redis and Celery"
SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
RUNS = [f"run{i:03d}" for i in range(SPEC.n_runs)]
# A run is one step: the four run assets and their checks.
RUN_STEP = "run_assets"
# Stamps of the input files (their mtimes): they differ between two copies of the same runs.
INPUT_STAMPS = {"file_stamp"}


def _ping(url: str) -> None:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=5).ping()
    except redis.RedisError as error:
        safe = re.sub(r"//[^@/]*@", "//***@", url)
        unavailable(f"Redis at {REDIS_URL_VAR}={safe} is unreachable: {error}", NEEDS)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[str]:
    """The URL of a reachable Redis database: the given one, or a throwaway server."""
    try:
        import dagster_celery  # noqa: F401
        import redis  # noqa: F401
    except ImportError as error:
        unavailable(f"the `celery` extra is missing ({error}): pip install -e '.[celery]'", NEEDS)
    url = os.environ.get(REDIS_URL_VAR)
    if url:
        _ping(url)
        yield url
        return
    if shutil.which("redis-server") is None:
        unavailable(
            f"{REDIS_URL_VAR} is not set and redis-server is not installed "
            "(Debian: apt-get install redis-server)",
            NEEDS,
        )
    folder = tmp_path_factory.mktemp("redis") / "server"
    script = REPO / "deploy" / "celery" / "redis.sh"
    started = subprocess.run(
        ["bash", str(script), "start", str(folder), str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run(["bash", str(script), "stop", str(folder)], timeout=60, check=True)


@pytest.fixture
def broker(redis_server: str) -> Iterator[str]:
    """The Redis database, emptied: no task left by an earlier test reaches these workers."""
    import redis

    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield redis_server
    client.flushdb()
    client.close()


@pytest.fixture
def celery_env(pg_env: dict[str, str], broker: str) -> dict[str, str]:
    """The one environment of workers, daemon and ``statepool``: same instance, store, broker."""
    return {
        **pg_env,
        "PATH": f"{BIN}{os.pathsep}{pg_env.get('PATH', '')}",
        "STATEPOOL_EXECUTOR": "celery",
        "STATEPOOL_CELERY_BROKER": broker,
    }


@dataclass
class Worker:
    """A Celery worker started by deploy/celery/workers.sh."""

    node: str  # Celery's node name, NAME@host: what the step events record
    proc: subprocess.Popen
    log: Path


@pytest.fixture
def workers(celery_env: dict[str, str], tmp_path: Path) -> Iterator[list[Worker]]:
    """Two workers on the broker, ready for tasks; stopped afterwards."""
    script = REPO / "deploy" / "celery" / "workers.sh"
    started: list[tuple[str, subprocess.Popen, Path]] = []
    try:
        for i in (1, 2):
            name = f"statepool-test-{os.getpid()}-{i}"
            log = tmp_path / f"worker{i}.log"
            proc = start_group(["bash", str(script), name], celery_env, log, cwd=tmp_path)
            started.append((name, proc, log))
        ready = []
        deadline = time.monotonic() + 120
        for name, proc, log in started:
            pattern = re.compile(rf"({re.escape(name)}@\S+) ready\.")
            while not (found := pattern.search(log.read_text(errors="replace"))):
                tail = log.read_text(errors="replace")[-4000:]
                assert proc.poll() is None, f"worker {name} exited:\n{tail}"
                assert time.monotonic() < deadline, f"worker {name} not ready:\n{tail}"
                time.sleep(0.2)
            ready.append(Worker(found.group(1), proc, log))
        yield ready
    finally:
        for _, proc, _ in started:
            stop_group(proc)


def _tables(store: Path) -> dict[str, object]:
    """Every asset table in the store, less the input files' stamps: ``{path: table}``."""
    tables = {}
    for path in sorted(store.glob("*/*.parquet")):
        table = pq.read_table(path)
        tables[str(path.relative_to(store))] = table.drop_columns(
            [c for c in table.column_names if c in INPUT_STAMPS]
        )
    return tables


def _assert_same_store(store: Path, reference: Path) -> None:
    assert store_pool(store) == store_pool(reference)
    ours, theirs = _tables(store), _tables(reference)
    assert sorted(ours) == sorted(theirs)
    for path, table in ours.items():
        assert table.equals(theirs[path]), f"{path} differs from a local sync's"


def _group(pid: int) -> int | None:
    """The process group of a live process (None once it is gone)."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _celery_steps(instance, run_id: str, workers: list[Worker]) -> dict[str, str]:
    """``{step: worker node}`` for every step of the run, checking a worker's process ran it.

    dagster-celery's task records an engine event naming the worker that picked the step
    up; the step's own events carry the pid of the process that executed it.
    """
    from dagster import DagsterEventType

    groups = {w.proc.pid for w in workers}
    nodes: dict[str, str] = {}
    started = set()
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        if event.event_type == DagsterEventType.ENGINE_EVENT and "Celery worker" in (
            event.engine_event_data.metadata
        ):
            nodes[event.step_key] = event.engine_event_data.metadata["Celery worker"].value
        if event.event_type == DagsterEventType.STEP_START:
            assert _group(event.pid) in groups, f"{event.step_key} ran outside the workers"
            started.add(event.step_key)
    assert started == set(nodes), "a step started without a Celery task"
    return nodes


def test_sync_on_celery_workers_equals_a_local_sync(
    workspace, tmp_path, celery_env, pg_instance, workers
):
    """``statepool sync`` with STATEPOOL_EXECUTOR=celery: one batch run, its step on a worker."""
    from dagster import RunsFilter

    reference = local_sync(tmp_path / "local", SPEC)
    generate_runs(workspace.runs, SPEC)
    report = sync_json(celery_env, tmp_path)
    assert (report["new"], report["failed"]) == (SPEC.n_runs, 0)
    assert report["states_written"] == SPEC.n_runs * SPEC.n_checkpoints
    _assert_same_store(workspace.store, reference)

    [record] = pg_instance.get_run_records(RunsFilter(job_name="statepool_job"))
    assert record.dagster_run.is_success
    assert record.dagster_run.tags["dagster/asset_partition_range_start"] == RUNS[0]
    assert record.dagster_run.tags["dagster/asset_partition_range_end"] == RUNS[-1]
    nodes = _celery_steps(pg_instance, record.dagster_run.run_id, workers)
    assert set(nodes) == {RUN_STEP}
    assert set(nodes.values()) <= {w.node for w in workers}


def test_backfill_through_the_daemon_on_celery_workers_equals_a_local_sync(
    workspace, tmp_path, celery_env, pg_instance, workers
):
    """A Dagster backfill of statepool_job, launched by the daemon, its steps on the workers."""
    from dagster import DagsterRunStatus, RunsFilter

    reference = local_sync(tmp_path / "local", SPEC)
    generate_runs(workspace.runs, SPEC)
    pg_instance.add_dynamic_partitions("runs", RUNS)
    # A long settle time keeps the sensor from requesting runs of its own.
    env = {**celery_env, "STATEPOOL_SENSOR_INTERVAL": "2", "STATEPOOL_SETTLE_SECONDS": "100000"}
    workspace_file = str(REPO / "workspace.yaml")
    backfill = subprocess.run(
        [
            *(str(BIN / "dagster"), "job", "backfill", "-w", workspace_file),
            *("-j", "statepool_job", "--partitions", ",".join(RUNS), "--noprompt"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert backfill.returncode == 0, backfill.stderr[-4000:]
    [backfill_record] = pg_instance.get_backfills()

    def runs() -> list:
        return pg_instance.get_run_records(
            RunsFilter(
                job_name="statepool_job", tags={"dagster/backfill": backfill_record.backfill_id}
            )
        )

    assert len(runs()) == SPEC.n_runs
    log = tmp_path / "daemon.log"
    with daemon(env, log) as proc:
        wait_until(lambda: all(r.dagster_run.is_finished for r in runs()), 240, proc, log)
    records = runs()
    statuses = {r.dagster_run.tags["dagster/partition"]: r.dagster_run.status for r in records}
    assert statuses == dict.fromkeys(RUNS, DagsterRunStatus.SUCCESS), json.dumps(
        {k: str(v) for k, v in statuses.items()}
    )
    _assert_same_store(workspace.store, reference)
    for record in records:
        nodes = _celery_steps(pg_instance, record.dagster_run.run_id, workers)
        assert set(nodes) == {RUN_STEP}
        # Which idle worker takes each run's one task is up to Celery.
        assert set(nodes.values()) <= {w.node for w in workers}
