"""What the project's event logs add that Dagster's contract suite never reaches, on both.

``tests/storages/test_contract_*.py`` run Dagster's own suite, which never opens ``batched_writes``,
fails a batch, forks, or builds a shard where hard links are refused. Here, on the SQLite
(``storages/sqlite.py``) and the PostgreSQL (``storages/postgres.py``) storage alike: several
materializations of one asset in one batch leave the rows Dagster's storage leaves for the same
events stored one by one; a failed batch, nested or not, keeps none of its asset rows; the
partition reads are answered once per batch. Then SQLite's own: a shard built Dagster's way
when the copy cannot be linked, and ``upgrade()``. (A failed batch of plain events, nested
batches and a forked child: ``tests/storages/test_event_storage.py``.)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as db
from dagster import AssetKey, AssetMaterialization, AssetObservation, DagsterEventType
from dagster._core.events import (
    AssetMaterializationPlannedData,
    AssetObservationData,
    DagsterEvent,
    StepMaterializationData,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from test_event_storage import engine_event

from statepool_dagster.storages.sqlite import StatepoolSqliteEventLogStorage

A, B, LOST = AssetKey("a"), AssetKey(["b", "c"]), AssetKey("lost")
MATERIALIZATION = DagsterEventType.ASSET_MATERIALIZATION


def asset_event(kind: str, key: AssetKey, partition: str | None, run_id: str, at: float):
    if kind == "planned":
        data = AssetMaterializationPlannedData(key, partition=partition)
        event_type = DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    elif kind == "observed":
        data = AssetObservationData(AssetObservation(key, partition=partition))
        event_type = DagsterEventType.ASSET_OBSERVATION
    else:
        tags = {"dagster/data_version": f"{run_id}-{partition}-{at}"}
        data = StepMaterializationData(AssetMaterialization(key, partition=partition, tags=tags))
        event_type = MATERIALIZATION
    return EventLogEntry(
        error_info=None,
        user_message=f"{kind} {partition}",
        level="debug",
        run_id=run_id,
        timestamp=at,
        dagster_event=DagsterEvent(event_type.value, "job", event_specific_data=data),
    )


def several_of_one_asset() -> list[EventLogEntry]:
    """What one step's recording of runs may hold: each planned, then materialized (one
    partition twice, the later one last), an observation between, a second asset."""
    at = time.time()
    script = [
        ("planned", A, "p1", "r1"),
        ("planned", A, "p2", "r1"),
        ("planned", B, None, "r1"),
        ("materialized", A, "p1", "r1"),
        ("materialized", A, "p2", "r1"),
        ("observed", A, "p2", "r1"),
        ("materialized", B, None, "r1"),
        ("planned", A, "p1", "r2"),
        ("materialized", A, "p1", "r2"),
    ]
    return [asset_event(*step, at=at + i) for i, step in enumerate(script)]


def readback(storage) -> dict:
    """What the UI, the sensors and the asset graph read of assets A and B."""
    found: dict = {"keys": sorted(storage.all_asset_keys(), key=str)}
    found["records"] = [r.asset_entry for r in storage.get_asset_records([A, B])]
    found["latest"] = storage.get_latest_materialization_events([A, B])
    for key in (A, B):
        found[key] = (
            storage.get_materialized_partitions(key),
            storage.get_latest_storage_id_by_partition(key, MATERIALIZATION),
            storage.get_latest_tags_by_partition(key, MATERIALIZATION, ["dagster/data_version"]),
            [
                (r.storage_id, r.event_log_entry)
                for r in storage.fetch_materializations(key, 20).records
            ],
            [
                (r.storage_id, r.event_log_entry)
                for r in storage.fetch_observations(key, 20).records
            ],
        )
    return found


@contextlib.contextmanager
def built(kind: str, request, tmp_path: Path) -> Iterator[tuple]:
    """The project's storage and Dagster's own, each fresh: SQLite, or on the PostgreSQL server."""
    if kind == "sqlite":
        ours = StatepoolSqliteEventLogStorage(str(tmp_path / "ours"))
        stock = SqliteEventLogStorage(str(tmp_path / "stock"))
    else:
        pg_url, other = request.getfixturevalue("pg_url"), request.getfixturevalue("other_pg_url")
        from dagster_postgres import PostgresEventLogStorage

        from statepool_dagster.storages.postgres import StatepoolPostgresEventLogStorage

        ours, stock = StatepoolPostgresEventLogStorage(pg_url), PostgresEventLogStorage(other)
    try:
        yield ours, stock
    finally:
        ours.dispose()
        stock.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def storages(request, tmp_path) -> Iterator[tuple]:
    with built(request.param, request, tmp_path) as pair:
        yield pair


def test_several_materializations_of_one_asset_in_a_batch_leave_dagsters_rows(storages):
    ours, stock = storages
    events = several_of_one_asset()
    with ours.batched_writes():
        for event in events:
            ours.store_event(event)
    for event in events:
        stock.store_event(event)
    expected = readback(stock)
    assert readback(ours) == expected
    (entry_a, _) = expected["records"]
    assert entry_a.last_materialization_record.event_log_entry.run_id == "r2"
    assert expected[A][0] == {"p1", "p2"}


def test_a_failed_batch_keeps_no_asset_rows(storages):
    ours, _ = storages
    kept = several_of_one_asset()
    with ours.batched_writes():
        for event in kept:
            ours.store_event(event)
    before = readback(ours)
    lost = [asset_event("planned", LOST, "p", "r3", 1.0), asset_event("done", LOST, "p", "r3", 2.0)]
    lost += [asset_event("done", A, "p9", "r3", 3.0)]
    with pytest.raises(RuntimeError), ours.batched_writes():
        for event in lost:
            ours.store_event(event)
        raise RuntimeError("the step failed")
    with pytest.raises(RuntimeError), ours.batched_writes():
        ours.store_event(lost[0])
        with ours.batched_writes():  # nested: the outermost decides
            ours.store_event(lost[1])
            raise RuntimeError("the step failed")
    assert readback(ours) == before
    assert ours.get_asset_records([LOST]) == []
    assert ours.get_logs_for_run("r3") == []


@contextlib.contextmanager
def statements(about: str) -> Iterator[list[str]]:
    """The SQL statements this process sends that name ``about``, as they are sent."""
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:
        if about in statement:
            seen.append(statement)

    db.event.listen(db.engine.Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        db.event.remove(db.engine.Engine, "before_cursor_execute", record)


def test_partitions_are_read_once_a_batch(storages):
    ours, _ = storages
    ours.add_dynamic_partitions("runs", ["a", "b"])
    with statements("FROM dynamic_partitions") as seen, ours.batched_writes():
        for _ in range(3):
            assert ours.has_dynamic_partition("runs", "a")
            assert not ours.has_dynamic_partition("runs", "z")
            assert list(ours.get_dynamic_partitions("runs")) == ["a", "b"]
            ours.store_event(engine_event("r", "inside"))
    assert len(seen) == 1
    with statements("FROM dynamic_partitions") as seen:  # outside a batch, every call reads
        assert not ours.has_dynamic_partition("runs", "c")
        assert list(ours.get_dynamic_partitions("runs")) == ["a", "b"]
    assert len(seen) == 2
    ours.add_dynamic_partitions("runs", ["c"])
    with pytest.raises(RuntimeError), ours.batched_writes():
        assert ours.has_dynamic_partition("runs", "c")  # a new batch reads anew
        raise RuntimeError("stop")
    ours.add_dynamic_partitions("runs", ["d"])
    with ours.batched_writes():  # a failed batch left nothing read behind
        assert list(ours.get_dynamic_partitions("runs")) == ["a", "b", "c", "d"]


def shard_schema(path: Path) -> tuple:
    with contextlib.closing(sqlite3.connect(path)) as shard:
        return (
            sorted(shard.execute("SELECT type, name, sql FROM sqlite_master")),
            shard.execute("SELECT version_num FROM alembic_version").fetchall(),
        )


def test_a_shard_is_built_dagsters_way_when_the_copy_cannot_be_linked(tmp_path, monkeypatch):
    def refused(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted")  # as on a file system without links

    monkeypatch.setattr(os, "link", refused)
    ours = StatepoolSqliteEventLogStorage(str(tmp_path))
    ours.store_event(engine_event("r", "ours"))
    assert [e.user_message for e in ours.get_logs_for_run("r")] == ["ours"]
    ours.dispose()
    # The empty shard Dagster's own setup made for the copy, and the shard it made instead.
    (template,) = tmp_path.glob(".statepool-empty-shard-*.sqlite")
    assert shard_schema(tmp_path / "r.db") == shard_schema(template)
    assert [p.name for p in tmp_path.iterdir() if ".part" in p.name] == []


def test_upgrade_leaves_a_working_storage(tmp_path):
    ours = StatepoolSqliteEventLogStorage(str(tmp_path))
    ours.store_event(engine_event("r", "before"))
    events = several_of_one_asset()
    with ours.batched_writes():
        for event in events:
            ours.store_event(event)
    before = readback(ours)
    ours.upgrade()
    assert readback(ours) == before
    ours.store_event(engine_event("r", "after"))
    ours.dispose()
    stock = SqliteEventLogStorage(str(tmp_path))  # the files as Dagster's own storage reads them
    assert [e.user_message for e in stock.get_logs_for_run("r")] == ["before", "after"]
    assert readback(stock) == before
    stock.dispose()


def check_events(run_id: str, at: float) -> list[EventLogEntry]:
    """A check planned over three partitions of one run, then evaluated for each, one failed."""
    from dagster import AssetCheckEvaluation
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationPlanned,
    )
    from dagster._core.definitions.partitions.subset.default import DefaultPartitionsSubset

    keys = ["p1", "p2", "p3"]
    planned = AssetCheckEvaluationPlanned(
        asset_key=A, check_name="fine", partitions_subset=DefaultPartitionsSubset(set(keys))
    )
    events = [(DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED, planned)]
    events += [
        (
            DagsterEventType.ASSET_CHECK_EVALUATION,
            AssetCheckEvaluation(
                asset_key=A, check_name="fine", passed=key != "p2", partition=key, metadata={}
            ),
        )
        for key in keys
    ]
    return [
        EventLogEntry(
            error_info=None,
            user_message="",
            level="debug",
            run_id=run_id,
            timestamp=at + i,
            dagster_event=DagsterEvent(kind.value, "job", event_specific_data=data),
        )
        for i, (kind, data) in enumerate(events)
    ]


def check_rows(storage) -> list[tuple]:
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable as T

    columns = [c for c in T.c if c.name not in ("id", "create_timestamp")]
    with storage.index_connection() as conn:
        return [tuple(r) for r in conn.execute(db.select(*columns).order_by(T.c.id)).fetchall()]


def test_a_planned_check_and_its_evaluations_in_a_batch_leave_dagsters_rows(storages):
    ours, stock = storages
    events = check_events("r1", time.time())
    with ours.batched_writes():
        ours.store_event_batch(events[:1])
        for event in events[1:]:
            ours.store_event(event)
    stock.store_event_batch(events[:1])
    for event in events[1:]:
        stock.store_event(event)
    rows = check_rows(stock)
    assert check_rows(ours) == rows
    # A row per partition, planned, then updated by its evaluation.
    assert sorted((r[2], r[4]) for r in rows) == [
        ("p1", "SUCCEEDED"),
        ("p2", "FAILED"),
        ("p3", "SUCCEEDED"),
    ]
    key = events[1].get_dagster_event().event_specific_data.asset_check_key

    def history(storage) -> list[tuple]:  # what the UI reads; the rows' creation times aside
        records = storage.get_asset_check_execution_history(key, limit=10)
        return [(r.id, r.run_id, r.status, r.partition, r.event) for r in records]

    assert history(ours) == history(stock)
