"""The PostgreSQL event log ``deploy/postgres/dagster.yaml`` names: Dagster's own, connecting less.

It changes how Dagster's ``PostgresEventLogStorage`` connects, not what it writes: inside
``batched_writes`` every statement goes through one connection in one transaction (a run's
planned events in one insert, each asset's row once at the batch's end by
``batch.py``, the ``NOTIFY``s in one statement before the commit); outside, each call
connects as Dagster's does. Whether a table exists is asked once per table per process.
Why and what it saves: docs/performance.md, "Dagster's bookkeeping".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster import DagsterEventType
from dagster._config.config_schema import UserConfigSchema
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.config import pg_config
from dagster._core.storage.event_log import AssetKeyTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.migration import ASSET_KEY_INDEX_COLS
from dagster._serdes import ConfigurableClassData
from dagster_postgres.event_log.event_log import CHANNEL_NAME, PostgresEventLogStorage
from dagster_postgres.utils import (
    create_pg_connection,
    get_token_provider_from_config,
    pg_url_from_config,
    retry_pg_connection_fn,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from .batch import PartitionsReadOncePerBatch, PlannedChecksSerializedOnce, merged_asset_rows

NOTIFY_ALL = db.text("SELECT pg_notify(:channel, n) FROM unnest(CAST(:ids AS text[])) n")
PLANNED = {
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
}


class StatepoolPostgresEventLogStorage(
    PartitionsReadOncePerBatch, PlannedChecksSerializedOnce, PostgresEventLogStorage
):
    """``PostgresEventLogStorage`` with a batch of writes on one connection and transaction."""

    def __init__(self, postgres_url: str, *args: Any, **kwargs: Any):
        self._local = threading.local()
        self._tables: set[str] = set()
        super().__init__(postgres_url, *args, **kwargs)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return pg_config()

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> StatepoolPostgresEventLogStorage:
        return cls(
            pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            inst_data=inst_data,
            token_provider=get_token_provider_from_config(config_value),
        )

    @contextmanager
    def _connect(self) -> Iterator[Connection]:  # ty: ignore[invalid-method-override]
        session = getattr(self._local, "session", None)
        if session is not None and session[0] == os.getpid():
            yield session[1]
            return
        with create_pg_connection(self._engine) as conn:
            yield conn

    @contextmanager
    def batched_writes(self) -> Iterator[None]:
        """Everything this thread stores inside, on one connection, committed at the end.

        Nested uses join the outermost. On an error nothing of it is kept.
        """
        if getattr(self._local, "session", None) is not None:
            yield
            return
        conn = retry_pg_connection_fn(self._engine.connect)
        try:
            # The engine autocommits: a transaction needs the connection's own isolation level.
            conn = conn.execution_options(isolation_level="READ COMMITTED")
            transaction = conn.begin()
            self._local.session = (os.getpid(), conn)
            self._local.notify = []
            self._local.asset_rows = []
            try:
                yield
                self._write_asset_rows()
                if self._local.notify:
                    conn.execute(NOTIFY_ALL, {"channel": CHANNEL_NAME, "ids": self._local.notify})
            except BaseException:
                transaction.rollback()
                raise
            finally:
                self._local.session = self._local.notify = self._local.asset_rows = None
                self._end_batch_reads()
            transaction.commit()
        finally:
            conn.close()

    def _insert(self, events: Sequence[EventLogEntry]) -> list[int]:
        """Insert ``events`` in one statement (inside a batch); their ids, in order."""
        statement = self.prepare_insert_event_batch(events).returning(
            SqlEventLogStorageTable.c.run_id, SqlEventLogStorageTable.c.id
        )
        with self._connect() as conn:
            rows = conn.execute(statement).fetchall()
        self._local.notify.extend(f"{run_id}_{event_id}" for run_id, event_id in rows)
        return [int(event_id) for _, event_id in rows]

    def _write_asset_rows(self) -> None:
        """Each asset's row once, as the batch's asset events one by one would leave it."""
        if not self._local.asset_rows:
            return
        has_index_cols = self.has_secondary_index(ASSET_KEY_INDEX_COLS)
        rows = merged_asset_rows(self, self._local.asset_rows, has_index_cols)
        with self.index_transaction() as conn:
            for key, values in rows.items():
                query = postgresql.insert(AssetKeyTable).values(asset_key=key, **values)
                if values:
                    query = query.on_conflict_do_update(
                        index_elements=[AssetKeyTable.c.asset_key], set_=values
                    )
                else:
                    query = query.on_conflict_do_nothing()
                conn.execute(query)

    def store_event(self, event: EventLogEntry) -> None:
        """Dagster's ``store_event``; inside a batch, its ``NOTIFY`` sent and its asset's row
        written at the batch's end."""
        if getattr(self._local, "session", None) is None:
            super().store_event(event)
            return
        (event_id,) = self._insert([event])
        kind = event.dagster_event_type
        if kind in ASSET_EVENTS and event.get_dagster_event().asset_key:
            with self.index_transaction() as conn:
                self._store_asset_event_tags(conn, [event], [event_id])
            self._local.asset_rows.append((event, event_id))
        if kind in ASSET_CHECK_EVENTS:
            self.store_asset_check_event(event, event_id)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Dagster's batch write on one transaction; planned events in one insert."""
        with self.batched_writes():
            if not events or not {e.dagster_event_type for e in events} <= PLANNED:
                super().store_event_batch(events)  # materializations: Dagster's bulk insert
                return
            for event, event_id in zip(events, self._insert(events), strict=True):
                if event.dagster_event_type in ASSET_CHECK_EVENTS:
                    self.store_asset_check_event(event, event_id)
                elif event.get_dagster_event().asset_key is not None:
                    self._local.asset_rows.append((event, event_id))

    def has_table(self, table_name: str) -> bool:
        # Asked for every stored asset event; a table, once there, stays.
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables
