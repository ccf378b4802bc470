"""The PostgreSQL event log of ``storages/postgres.py`` against Dagster's own as the oracle.

The same sync on an instance with Dagster's ``PostgresEventLogStorage`` and on one with ours
(``deploy/postgres/dagster.yaml``) must read back the same. Then what ours adds: a batch on
one transaction, all or nothing. Each test has fresh databases on the server
``STATEPOOL_TEST_PG_URL`` names (see ``conftest.py``).
"""

from __future__ import annotations

from dagster import DagsterInstance, instance_for_test
from test_event_storage import SPEC, assert_batch_is_all_or_nothing, engine_event, synced

from statepool_dagster.core import names
from statepool_dagster.demo.sample_runs import generate_runs

from process_helpers import REPO


def ours(home, url: str, monkeypatch) -> DagsterInstance:
    home.mkdir()
    config = REPO / "deploy" / "postgres" / "dagster.yaml"
    (home / "dagster.yaml").write_bytes(config.read_bytes())
    monkeypatch.setenv("DAGSTER_PG_URL", url)
    return DagsterInstance.from_config(str(home))


def test_a_sync_reads_back_as_on_dagsters_own_postgres_storage(
    workspace, tmp_path, monkeypatch, pg_url, other_pg_url
):
    from dagster_postgres import PostgresEventLogStorage

    from statepool_dagster.storages.postgres import StatepoolPostgresEventLogStorage

    generate_runs(workspace.runs, SPEC)
    with open(workspace.run("run001") / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")  # a failing check too
    (tmp_path / "stock").mkdir()
    stock_config = {"storage": {"postgres": {"postgres_url": other_pg_url}}}
    with instance_for_test(overrides=stock_config, temp_dir=str(tmp_path / "stock")) as stock:
        assert type(stock.event_log_storage) is PostgresEventLogStorage
        expected = synced(stock, tmp_path / "stock", monkeypatch)
    with ours(tmp_path / "ours", pg_url, monkeypatch) as instance:
        assert type(instance.event_log_storage) is StatepoolPostgresEventLogStorage
        assert synced(instance, tmp_path / "ours", monkeypatch) == expected
    assert expected[(names.STATES, "run001", names.ROW_COUNT)].value == SPEC.n_checkpoints
    assert ("ASSET_MATERIALIZATION_PLANNED", names.STATES, "run002") in expected["events"]


def test_a_batch_is_all_or_nothing_on_postgres(tmp_path, monkeypatch, pg_url):
    with ours(tmp_path / "home", pg_url, monkeypatch) as instance:
        storage = instance.event_log_storage
        with storage.batched_writes():
            for i in range(3):
                storage.store_event(engine_event("r1", str(i)))
        assert_batch_is_all_or_nothing(storage, seen_inside=True)


def test_a_batch_notifies_each_event_and_keeps_asset_rows_as_dagster_does(
    tmp_path, monkeypatch, pg_url
):
    import psycopg2
    from dagster_postgres.event_log.event_log import CHANNEL_NAME

    listener = psycopg2.connect(pg_url)
    listener.autocommit = True
    listener.cursor().execute(f"LISTEN {CHANNEL_NAME}")
    with ours(tmp_path / "home", pg_url, monkeypatch) as instance:
        storage = instance.event_log_storage
        with storage.batched_writes():
            for i in range(3):
                storage.store_event(engine_event("r1", str(i)))
        ids = [r.storage_id for r in storage.get_records_for_run("r1").records]
    listener.poll()
    assert [n.payload for n in listener.notifies] == [f"r1_{i}" for i in ids]
    listener.close()


def test_planned_events_leave_the_asset_rows_dagsters_would(
    workspace, tmp_path, monkeypatch, pg_url
):
    generate_runs(workspace.runs, SPEC)
    with ours(tmp_path / "ours", pg_url, monkeypatch) as instance:
        synced(instance, tmp_path / "ours", monkeypatch)
        runs = {r.run_id for r in instance.get_runs()}
        for record in instance.get_asset_records():
            entry = record.asset_entry
            assert entry.last_run_id in runs
            latest = entry.last_materialization_record
            assert latest is not None and latest.run_id == entry.last_run_id
