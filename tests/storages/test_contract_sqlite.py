"""Dagster's own event-log contract suite against the project's SQLite event log.

Dagster's ``TestSqliteEventLogStorage`` (``TestEventLogStorage`` and SQLite's own tests) from
the installed Dagster release's source (``tests/storages/dagster_suite.py`` fetches it: ``make
contract-suite``), its fixtures giving the class under test: a fresh instance per test whose
event log is ours (``storages/sqlite.py``). It must pass what Dagster's ``SqliteEventLogStorage``
passes (``docs/development.md`` has the counts). Without the suite on the machine the tests
skip; under ``CI=true`` they fail.
"""

from __future__ import annotations

import pytest
from dagster import instance_for_test
from dagster_suite import SuiteUnavailable, event_log_suite, sqlite_suite

from statepool_dagster.storages.sqlite import StatepoolSqliteEventLogStorage

from process_helpers import unavailable

pytestmark = pytest.mark.slow

OURS = {
    "event_log_storage": {
        "module": "statepool_dagster.storages.sqlite",
        "class": "StatepoolSqliteEventLogStorage",
    }
}


@pytest.fixture(scope="module", autouse=True)
def defensive_checks():
    """What Dagster's own ``conftest.py`` sets for its tests."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_RECORD_DEFENSIVE_CHECKS", "true")
        yield


try:
    suite, sqlite = event_log_suite(), sqlite_suite()
except SuiteUnavailable as error:
    reason = str(error)

    def test_dagsters_contract_suite_is_here():
        unavailable(reason, "Dagster's contract suite")

else:

    class TestStatepoolSqliteEventLogStorage(sqlite.TestSqliteEventLogStorage):
        __test__ = True

        # Dagster's fixtures, building the class under test.
        @pytest.fixture(name="instance")
        def instance(self, tmp_path):
            with instance_for_test(temp_dir=str(tmp_path), overrides=OURS) as instance:
                yield instance

        @pytest.fixture(name="storage")
        def event_log_storage(self, instance):
            assert type(instance.event_log_storage) is StatepoolSqliteEventLogStorage
            yield instance.event_log_storage

        # The suite parametrizes this test with a generator, which feeds only the first class
        # collected in a session: the same values, as a list.
        @pytest.mark.parametrize("cursor_dt", list(suite.cursor_datetime_args()))
        def test_get_event_records(self, storage, instance, cursor_dt):
            super().test_get_event_records(storage, instance, cursor_dt)
