"""Dagster's own event-log contract suite against the project's PostgreSQL event log.

dagster-postgres's ``TestPostgresEventLogStorage`` (``TestEventLogStorage`` and PostgreSQL's own
tests) from the installed release's source (``tests/storages/dagster_suite.py`` fetches it: ``make
contract-suite``), twice: against ``StatepoolPostgresEventLogStorage`` as the instance uses it,
and with every ``store_event`` inside its own ``batched_writes`` (the path a step's recording
takes, which the suite never calls). Each class has a fresh database on the server
``STATEPOOL_TEST_PG_URL`` names (``conftest.py``), wiped before each test as Dagster's fixture
does. Without the suite, or the server, the tests skip; under ``CI=true`` they fail.

Adapted, no test body changed: the database fixtures (Dagster's come from its unpublished
``dagster_test`` package, docker-compose); the file's ``_clean_storage`` and its two
module-level tests build the class under test, run as the class's own; ``test_load_from_config``
names the stock class at port 5432 and database ``test``: here the same check for the class
under test and the server's address.
"""

from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import quote

import pytest
import sqlalchemy
from dagster import instance_for_test
from dagster._core.storage.event_log import SqlEventLogStorageMetadata
from dagster_suite import SuiteUnavailable, event_log_suite, postgres_suite
from sqlalchemy.pool import NullPool

from process_helpers import unavailable

pytestmark = pytest.mark.slow

try:
    from statepool_dagster.storages.postgres import StatepoolPostgresEventLogStorage
except ImportError as error:  # no `postgres` extra
    StatepoolPostgresEventLogStorage = None
    missing = f"the `postgres` extra is missing ({error}): pip install -e '.[postgres]'"
else:
    missing = None

    class BatchedEachEvent(StatepoolPostgresEventLogStorage):
        """The project's storage with every ``store_event`` in a batch of its own."""

        def store_event(self, event) -> None:
            with self.batched_writes():
                super().store_event(event)


def overrides(url: str, module: str, name: str, config: dict | None = None) -> dict:
    """Instance config: Dagster's run and schedule storage on ``url``, the event log ours."""

    def storage(module: str, name: str, config: dict) -> dict:
        return {"module": module, "class": name, "config": config}

    given = {"postgres_url": url}
    return {
        "run_storage": storage("dagster_postgres.run_storage", "PostgresRunStorage", given),
        "event_log_storage": storage(module, name, config or given),
        "schedule_storage": storage(
            "dagster_postgres.schedule_storage", "PostgresScheduleStorage", given
        ),
    }


def clean_storage(cls):
    """``_clean_storage`` of Dagster's file, building ``cls``: its tables dropped, made anew."""

    @contextmanager
    def _clean_storage(conn_string):
        engine = sqlalchemy.create_engine(conn_string, poolclass=NullPool)
        try:
            SqlEventLogStorageMetadata.drop_all(engine)
        finally:
            engine.dispose()
        storage = cls(conn_string)
        try:
            yield storage
        finally:
            storage.dispose()

    return _clean_storage


@pytest.fixture(scope="module", autouse=True)
def defensive_checks():
    """What Dagster's own ``conftest.py`` sets for its tests."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_RECORD_DEFENSIVE_CHECKS", "true")
        yield


try:
    if missing:
        raise SuiteUnavailable(missing)
    suite, pg = event_log_suite(), postgres_suite()
except SuiteUnavailable as error:
    reason = str(error)

    def test_dagsters_postgres_contract_suite_is_here():
        unavailable(reason, "Dagster's contract suite")

else:

    class TestStatepoolPostgresEventLogStorage(pg.TestPostgresEventLogStorage):
        __test__ = True
        storage_class = StatepoolPostgresEventLogStorage
        module = "statepool_dagster.storages.postgres"

        # Dagster's fixtures, building the class under test.
        @pytest.fixture(name="conn_string", scope="class")
        def conn_string(self, pg_class_url):
            return pg_class_url

        @pytest.fixture(autouse=True)
        def clean_storage_builds_this_class(self, monkeypatch):
            monkeypatch.setattr(pg, "_clean_storage", clean_storage(self.storage_class))

        @pytest.fixture(name="instance")
        def instance(self, conn_string):
            with clean_storage(self.storage_class)(conn_string):
                pass
            config = overrides(conn_string, self.module, self.storage_class.__name__)
            with instance_for_test(overrides=config) as instance:
                yield instance

        @pytest.fixture(name="storage")
        def event_log_storage(self, instance):
            assert type(instance.event_log_storage) is self.storage_class
            yield instance.event_log_storage

        # The suite parametrizes this test with a generator, which feeds only the first class
        # collected in a session: the same values, as a list.
        @pytest.mark.parametrize("cursor_dt", list(suite.cursor_datetime_args()))
        def test_get_event_records(self, storage, instance, cursor_dt):
            super().test_get_event_records(storage, instance, cursor_dt)

        # The file's module-level tests, for this class.
        def test_has_table_returns_connection_to_pool(self, conn_string):
            pg.test_has_table_returns_connection_to_pool(conn_string)

        def test_all_asset_keys_excludes_wiped_asset_on_legacy_index_path(self, conn_string):
            pg.test_all_asset_keys_excludes_wiped_asset_on_legacy_index_path(conn_string)

        def test_load_from_config(self, conn_string):
            """A URL and the same URL in parts configure the same storage, of this class."""
            from sqlalchemy.engine import make_url

            url = make_url(conn_string)
            port = url.port or 5432
            parts = {"username": url.username, "hostname": url.host, "port": port}
            parts["db_name"] = url.database
            user = quote(url.username)
            if url.password:
                parts["password"] = url.password
                user += f":{quote(url.password)}"
            whole = f"postgresql://{user}@{url.host}:{port}/{url.database}"
            name = self.storage_class.__name__
            by_url = overrides(whole, self.module, name)
            by_parts = overrides(whole, self.module, name, {"postgres_db": parts})
            with (
                instance_for_test(overrides=by_url) as one,
                instance_for_test(overrides=by_parts) as other,
            ):
                assert type(one.event_log_storage) is self.storage_class
                assert type(other.event_log_storage) is self.storage_class
                assert one.event_log_storage.postgres_url == whole
                assert other.event_log_storage.postgres_url == whole

    class TestStatepoolPostgresEventLogStorageBatched(TestStatepoolPostgresEventLogStorage):
        """The same, every ``store_event`` inside ``batched_writes``."""

        storage_class = BatchedEachEvent
        module = __name__
