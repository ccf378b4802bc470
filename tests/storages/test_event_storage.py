"""The project's SQLite event log (``storages/sqlite.py``) against Dagster's own as the oracle.

The same sync on an instance with Dagster's ``SqliteEventLogStorage`` and on one with ours
must read back the same: events, materializations and their metadata, check results,
partition queries. Then what ours adds: one transaction per batch (all or nothing), new
run shards identical to Dagster's, connections never shared with a forked child, the UI's
live watch, wipe.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    RunsFilter,
    instance_for_test,
)
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from sqlalchemy import text as db_text

from statepool_dagster.cli.sync import sync
from statepool_dagster.core import names
from statepool_dagster.defs.runs.checks import CHECK_SPECS
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs
from statepool_dagster.storages.sqlite import StatepoolSqliteEventLogStorage

from process_helpers import REPO

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)


def engine_event(run_id: str, message: str = "m") -> EventLogEntry:
    return EventLogEntry(
        error_info=None,
        user_message=message,
        level="debug",
        run_id=run_id,
        timestamp=time.time(),
        dagster_event=DagsterEvent(
            DagsterEventType.ENGINE_EVENT.value, "job", event_specific_data=EngineEventData()
        ),
    )


def readback(instance: DagsterInstance) -> dict:
    """What the UI and the sensor read, without ids and times."""
    events = []
    for record in instance.get_run_records(RunsFilter()):
        for entry in instance.all_logs(record.dagster_run.run_id):
            event = entry.dagster_event
            if event is not None:
                key = event.asset_key.to_user_string() if event.asset_key else None
                events.append((event.event_type_value, key, event.partition))
    found: dict = {"events": sorted(events, key=str)}
    for asset in names.RUN_ASSETS:
        key = AssetKey(asset)
        found[asset] = {
            "partitions": instance.get_materialized_partitions(key),
            "latest": sorted(
                instance.get_latest_storage_id_by_partition(
                    key, DagsterEventType.ASSET_MATERIALIZATION
                )
            ),
        }
        for record in instance.fetch_materializations(key, limit=100).records:
            metadata = record.asset_materialization.metadata
            found[(asset, record.partition_key)] = sorted(metadata)
            found[(asset, record.partition_key, names.ROW_COUNT)] = metadata[names.ROW_COUNT]
    for spec in CHECK_SPECS:
        for run in ("run000", "run001", "run002"):
            history = instance.event_log_storage.get_asset_check_execution_history(
                spec.key, limit=5, partition_filter=PartitionKeyFilter(key=run)
            )
            found[(spec.key, run)] = [(h.status, h.partition) for h in history]
    found["assets"] = sorted(r.asset_entry.asset_key for r in instance.get_asset_records())
    # Each asset's latest-state row: its last materialization, and the run it names.
    runs = [r.dagster_run.run_id for r in instance.get_run_records(RunsFilter(), ascending=True)]
    for record in instance.get_asset_records():
        entry = record.asset_entry
        last = entry.last_materialization_record
        found[("row", entry.asset_key)] = (
            last.partition_key if last else None,
            runs.index(last.run_id) if last else None,
            runs.index(entry.last_run_id) if entry.last_run_id else None,
        )
    return found


def synced(instance: DagsterInstance, root: Path, monkeypatch) -> dict:
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(root / "store"))
    summary = sync(instance)
    assert not summary.failed
    return readback(instance)


def test_a_sync_reads_back_as_on_dagsters_own_storage(workspace, tmp_path, monkeypatch):
    generate_runs(workspace.runs, SPEC)
    with open(workspace.run("run001") / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")  # a failing check too
    (tmp_path / "stock").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "stock")) as stock:
        assert type(stock.event_log_storage) is SqliteEventLogStorage
        expected = synced(stock, tmp_path / "stock", monkeypatch)
    home = tmp_path / "ours"
    home.mkdir()
    (home / "dagster.yaml").write_bytes((REPO / "dagster.yaml").read_bytes())
    with DagsterInstance.from_config(str(home)) as ours:
        assert type(ours.event_log_storage) is StatepoolSqliteEventLogStorage
        assert Path(ours.event_log_storage._base_dir) == home / "history" / "runs"
        assert synced(ours, home, monkeypatch) == expected
    assert expected[(names.STATES, "run001", names.ROW_COUNT)].value == SPEC.n_checkpoints
    assert ("ASSET_MATERIALIZATION_PLANNED", names.STATES, "run002") in expected["events"]


def test_a_new_run_shard_is_the_one_dagster_makes(tmp_path):
    ours = StatepoolSqliteEventLogStorage(str(tmp_path / "ours"))
    stock = SqliteEventLogStorage(str(tmp_path / "stock"))
    for storage in (ours, stock, ours):  # the second of ours is copied from the kept one
        with storage.run_connection(f"r{id(storage) % 7}x{time.monotonic_ns()}"):
            pass

    def schema(folder: Path) -> list:
        shards = sorted(p for p in folder.glob("*.db") if p.name != "index.db")
        seen = []
        for shard in shards:
            with sqlite3.connect(shard) as db:
                seen.append(
                    (
                        sorted(db.execute("SELECT type, name, sql FROM sqlite_master")),
                        db.execute("SELECT version_num FROM alembic_version").fetchall(),
                        db.execute("PRAGMA journal_mode").fetchone(),
                    )
                )
        return seen

    ours_schemas, stock_schemas = schema(tmp_path / "ours"), schema(tmp_path / "stock")
    assert len(ours_schemas) == 2 and ours_schemas[0] == ours_schemas[1] == stock_schemas[0]
    assert ours_schemas[0][2] == ("wal",)
    assert len(ours.get_all_run_ids()) == 2  # the kept empty shard is no run's
    ours.dispose()
    stock.dispose()


def test_a_batch_is_all_or_nothing(tmp_path):
    storage = StatepoolSqliteEventLogStorage(str(tmp_path))
    storage.store_event_batch([engine_event("r1", str(i)) for i in range(3)])
    assert_batch_is_all_or_nothing(storage)
    storage.dispose()


def assert_batch_is_all_or_nothing(storage, seen_inside: bool = False) -> None:
    """With events "0" to "2" of run r1 stored: a failed batch keeps none of its events, a
    nested one commits once (``seen_inside``: a batch reads its own writes)."""
    assert [e.user_message for e in storage.get_logs_for_run("r1")] == ["0", "1", "2"]
    with pytest.raises(RuntimeError), storage.batched_writes():
        storage.store_event(engine_event("r1", "lost"))
        storage.store_event(engine_event("r2", "lost too"))
        if seen_inside:
            assert len(storage.get_logs_for_run("r1")) == 4  # its own writes, seen inside
        raise RuntimeError("stop")
    assert len(storage.get_logs_for_run("r1")) == 3
    assert storage.get_logs_for_run("r2") == []
    with storage.batched_writes(), storage.batched_writes():  # nested: one transaction
        storage.store_event(engine_event("r2", "kept"))
    assert [e.user_message for e in storage.get_logs_for_run("r2")] == ["kept"]


def test_a_forked_child_makes_its_own_connections(tmp_path):
    storage = StatepoolSqliteEventLogStorage(str(tmp_path))
    storage.store_event(engine_event("r", "parent"))
    pid = os.fork()
    if pid == 0:  # the child: write through the same object, then leave without cleanup
        try:
            storage.store_event(engine_event("r", "child"))
            code = 0 if len(storage.get_logs_for_run("r")) == 2 else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    storage.store_event(engine_event("r", "parent again"))
    messages = [e.user_message for e in storage.get_logs_for_run("r")]
    assert messages == ["parent", "child", "parent again"]
    storage.dispose()


def test_the_live_watch_sees_events_on_kept_connections(tmp_path):
    storage = StatepoolSqliteEventLogStorage(str(tmp_path))
    storage.store_event(engine_event("r", "before"))
    seen: list[str] = []
    arrived = threading.Event()

    def callback(event, _cursor):
        seen.append(event.user_message)
        arrived.set()

    storage.watch("r", None, callback)
    try:
        time.sleep(0.5)
        storage.store_event(engine_event("r", "live"))
        assert arrived.wait(15), "the watch never fired"
        deadline = time.monotonic() + 15
        while "live" not in seen and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "live" in seen
    finally:
        storage.end_watch("r", callback)
        storage.dispose()


def test_wipe_and_delete_leave_a_working_storage(tmp_path):
    storage = StatepoolSqliteEventLogStorage(str(tmp_path))
    storage.store_event(engine_event("r", "old"))
    storage.wipe()
    assert storage.get_logs_for_run("r") == []
    storage.store_event(engine_event("r", "new"))
    assert [e.user_message for e in storage.get_logs_for_run("r")] == ["new"]
    storage.delete_events("r")
    assert storage.get_logs_for_run("r") == []
    storage.dispose()


def test_base_dir_can_still_be_given(tmp_path):
    config = {
        "event_log_storage": {
            "module": "statepool_dagster.storages.sqlite",
            "class": "StatepoolSqliteEventLogStorage",
            "config": {"base_dir": str(tmp_path / "elsewhere")},
        }
    }
    (tmp_path / "home").mkdir()
    with instance_for_test(overrides=config, temp_dir=str(tmp_path / "home")) as instance:
        instance.event_log_storage.store_event(engine_event("r"))
        assert (tmp_path / "elsewhere" / "r.db").exists()


def test_a_shard_left_unstamped_is_set_up_and_a_stamped_one_used_as_is(tmp_path):
    """Only Dagster's schema stamp says a shard is set up; without it Dagster's setup runs."""
    ours = StatepoolSqliteEventLogStorage(str(tmp_path / "ours"))
    half = tmp_path / "ours" / "half.db"
    with contextlib.closing(sqlite3.connect(half)) as db:  # what a kill leaves: no stamp
        db.execute("CREATE TABLE unrelated (x INTEGER)")
    with ours.run_connection("half"):
        pass
    with contextlib.closing(sqlite3.connect(half)) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall()
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "event_logs" in tables
    ours.dispose()
    again = StatepoolSqliteEventLogStorage(str(tmp_path / "ours"))
    with again.run_connection("half") as conn:
        assert conn.execute(db_text("SELECT count(*) FROM event_logs")).scalar() == 0
    again.dispose()
