"""Shared fixtures: real run folders, a real persistent instance, the original script."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from cli_helpers import cli_env
from instance_helpers import new_instance
from process_helpers import unavailable

REPO = Path(__file__).resolve().parents[1]
SEED_PATH = REPO.parent / "shared" / "reference" / "statepool_seed.py"
PG_URL_VAR = "STATEPOOL_TEST_PG_URL"
PG_CONFIG = REPO / "deploy" / "postgres" / "dagster.yaml"

# Property tests on shared, noisy machines: a slow draw or example is the machine, not a
# finding (per-test settings add to this profile). No example database in the checkout.
settings.register_profile(
    "statepool", deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
settings.load_profile("statepool")


@dataclass
class Workspace:
    """A runs folder and a store folder, wired into the STATEPOOL_* environment."""

    root: Path
    runs: Path
    store: Path

    def run(self, name: str) -> Path:
        return self.runs / name


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    runs, store = tmp_path / "runs", tmp_path / "store"
    runs.mkdir()
    monkeypatch.setenv("STATEPOOL_RUNS_DIR", str(runs))
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(store))
    return Workspace(tmp_path, runs, store)


@pytest.fixture(scope="session")
def synced_store(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any], Path]:
    """``synced_store(spec)``: sample runs for ``spec`` (in ``runs/`` beside the store),
    synced in-process once per spec and test process, and the store they were synced into.

    Tests read it; a test that changes it works on a copy in its ``tmp_path``.
    """
    from statepool_dagster.cli.sync import sync
    from statepool_dagster.demo.sample_runs import generate_runs

    stores: dict[Any, Path] = {}

    def synced(spec: Any) -> Path:
        if spec not in stores:
            root = tmp_path_factory.mktemp("synced")
            generate_runs(root / "runs", spec)
            with pytest.MonkeyPatch.context() as env, new_instance(root / "home") as instance:
                env.setenv("STATEPOOL_RUNS_DIR", str(root / "runs"))
                env.setenv("STATEPOOL_STORE_DIR", str(root / "store"))
                assert not sync(instance).failed
            stores[spec] = root / "store"
        return stores[spec]

    return synced


@pytest.fixture
def instance(tmp_path: Path):
    """A persistent SQLite instance in a temp DAGSTER_HOME with the project's dagster.yaml (it
    has a ref, like the daemon's)."""
    with new_instance(tmp_path / "dagster_home") as inst:
        yield inst


@pytest.fixture(scope="session")
def seed() -> ModuleType:
    """The original script, loaded from ../shared/reference (never copied into the project)."""
    if not SEED_PATH.is_file():
        pytest.skip(f"original script not found at {SEED_PATH}")
    spec = importlib.util.spec_from_file_location("statepool_seed", SEED_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("statepool_seed", module)
    spec.loader.exec_module(module)
    return module


# PostgreSQL (deploy/postgres/): test_postgres.py, test_celery.py, the event logs' tests.
@pytest.fixture(scope="session")
def pg_server() -> str:
    """The superuser URL of a reachable PostgreSQL server (``STATEPOOL_TEST_PG_URL``)."""
    url = os.environ.get(PG_URL_VAR)
    if not url:
        unavailable(
            f"{PG_URL_VAR} is not set: no PostgreSQL server to test against "
            "(e.g. `make pg-up`, then "
            f"{PG_URL_VAR}=postgresql://postgres@127.0.0.1:54329/postgres)",
            "PostgreSQL",
        )
    try:
        import dagster_postgres  # noqa: F401
        import psycopg2
        from sqlalchemy.engine import make_url
    except ImportError as error:
        unavailable(
            f"the `postgres` extra is missing ({error}): pip install -e '.[postgres]'",
            "PostgreSQL",
        )
    safe = make_url(url).render_as_string(hide_password=True)
    try:
        psycopg2.connect(url, connect_timeout=5).close()
    except psycopg2.Error as error:
        unavailable(
            f"PostgreSQL at {PG_URL_VAR}={safe} is unreachable: {str(error).strip()}",
            "PostgreSQL",
        )
    return url


@contextlib.contextmanager
def fresh_database(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the server (its URL), dropped afterwards."""
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
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the server, dropped after the test."""
    with fresh_database(pg_server) as url:
        yield url


@pytest.fixture(scope="class")
def pg_class_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database for a whole test class, dropped after it."""
    with fresh_database(pg_server) as url:
        yield url


@pytest.fixture
def other_pg_url(pg_server: str) -> Iterator[str]:
    """A second fresh database on the server, dropped after the test."""
    with fresh_database(pg_server) as url:
        yield url


@pytest.fixture
def pg_env(workspace, tmp_path, pg_url, monkeypatch) -> dict[str, str]:
    """Environment for a subprocess on a DAGSTER_HOME holding deploy/postgres/dagster.yaml."""
    home = tmp_path / "pg_home"
    home.mkdir()
    shutil.copy(PG_CONFIG, home / "dagster.yaml")
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
        assert type(instance.event_log_storage).__name__ == "StatepoolPostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        yield instance


# S3 (tests/s3server.py): moto's S3 server on 127.0.0.1, one port for the whole session, since
# fsspec keeps one S3 filesystem per set of options and the endpoint comes from the environment.
@pytest.fixture(scope="session")
def moto_s3():
    """moto's S3 server on 127.0.0.1 (a :class:`s3server.S3Server`), running for the session,
    its endpoint and dummy credentials in the environment (this process and its children)."""
    try:
        import moto.server  # noqa: F401
        import s3fs
    except ImportError as error:
        unavailable(f"moto[server] or s3fs is missing ({error}): pip install -e '.[dev]'", "S3")
    from s3server import S3Server

    with S3Server() as server, pytest.MonkeyPatch.context() as env:
        for name, value in server.env().items():
            env.setenv(name, value)
        s3fs.S3FileSystem.clear_instance_cache()
        yield server
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_bucket(moto_s3) -> str:
    """A new, empty bucket on the moto server: its ``s3://`` URL."""
    if not moto_s3.running:  # a test that stopped it failed before starting it again
        moto_s3.start()
    moto_s3.reset_requests()
    return moto_s3.make_bucket(f"test-{uuid.uuid4().hex[:12]}")
