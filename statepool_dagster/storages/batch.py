"""A batch of writes as both storages store it: each asset's row once, partitions read once.

Dagster's SQLite ``store_event`` keeps, per event, a row of the asset's latest state
(``asset_keys``): it tries an insert, catches the conflict, then updates, and for a
materialization serializes the whole event a second time into it. A batch (the runs a step
records in one write, a run's planned events) writes every event's own rows as
``store_event`` does, then each asset's row once, holding for each column what the last event
in the batch to set it would have left: the same row, one write. The SQLite storage writes
it with an insert or an update, the PostgreSQL one with an upsert (``merged_asset_rows``).

While a step records its partitions (inside ``batched_writes``), Dagster checks every
``context.add_asset_metadata(..., partition_key=...)`` against the run's partition range:
two ``has_dynamic_partition`` queries and a ``get_dynamic_partitions`` of every key, for each
asset of each partition, a few thousand queries a sync. Inside a batch they are answered
from one read of the partitions' keys, as a transaction with a snapshot of the table would
answer them; outside a batch every call reads the table, as Dagster's own storage does
(:class:`PartitionsReadOncePerBatch`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from dagster import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log import AssetKeyTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._serdes import serialize_value
from sqlalchemy import exc as db_exc

# The kinds a batch may hold that this writes; any other batch is stored event by event.
KINDS = {
    DagsterEventType.ASSET_MATERIALIZATION,
    DagsterEventType.ASSET_OBSERVATION,
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
    DagsterEventType.ASSET_CHECK_EVALUATION,
}
CHECK_KINDS = {
    DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
    DagsterEventType.ASSET_CHECK_EVALUATION,
}


INSERT_EVENT = SqlEventLogStorageTable.insert()


def batch_writable(events: Sequence[EventLogEntry]) -> bool:
    return bool(events) and all(e.dagster_event_type in KINDS for e in events)


def store_rows(
    storage: SqlEventLogStorage, events: Sequence[EventLogEntry]
) -> list[tuple[EventLogEntry, int]]:
    """Each event's own rows (all of :data:`KINDS`), as ``store_event`` writes them; the asset
    events with their ids, whose assets' rows are left to :func:`write_asset_rows`."""
    asset_events: list[tuple[EventLogEntry, int]] = []
    for event in events:
        # The row ``prepare_insert_event`` would bind into a statement of its own, given as
        # parameters of one constant insert instead: the same SQL, compiled once (SQLAlchemy
        # builds and keys a statement with bound values anew for every event).
        row = storage._event_to_row(event)
        with storage.run_connection(event.run_id) as conn:
            conn.execute(INSERT_EVENT, row)
        with storage.index_transaction() as conn:
            event_id = conn.execute(INSERT_EVENT, row).inserted_primary_key[0]
            if event.dagster_event_type in CHECK_KINDS:
                storage.store_asset_check_event(event, event_id)
            elif event.get_dagster_event().asset_key:
                storage._store_asset_event_tags(conn, [event], [event_id])
                asset_events.append((event, event_id))
    return asset_events


def write_asset_rows(
    storage: SqlEventLogStorage, asset_events: Sequence[tuple[EventLogEntry, int]]
) -> None:
    """Each asset's row as the events (in the order stored) would have left it, once."""
    if asset_events:
        with storage.index_transaction() as conn:
            _write_asset_rows(storage, conn, asset_events)


def _write_asset_rows(storage: SqlEventLogStorage, conn, asset_events) -> None:
    has_index_cols = storage._has_asset_key_index_cols_on_connection(conn)
    for key, values in merged_asset_rows(storage, asset_events, has_index_cols).items():
        if not values:
            continue
        try:
            conn.execute(AssetKeyTable.insert().values(asset_key=key, **values))
        except db_exc.IntegrityError:
            conn.execute(
                AssetKeyTable.update().values(**values).where(AssetKeyTable.c.asset_key == key)
            )


def merged_asset_rows(
    storage: SqlEventLogStorage,
    asset_events: Sequence[tuple[EventLogEntry, int]],
    has_index_cols: bool,
) -> dict[str, dict[str, Any]]:
    """Each asset's row values as ``asset_events``, written one by one, would leave them."""
    rows: dict[str, dict] = {}  # in the order the assets first appear, as their rows would be
    for event, _ in asset_events:
        rows.setdefault(event.get_dagster_event().asset_key.to_string(), {})
    for event, event_id in reversed(asset_events):  # the last to set a column decides it
        dagster_event = event.get_dagster_event()
        values = rows[dagster_event.asset_key.to_string()]
        if dagster_event.is_step_materialization and "last_materialization" in values:
            continue  # an earlier materialization sets nothing a later one has not
        for column, value in storage._get_asset_entry_values(
            event, event_id, has_index_cols
        ).items():
            values.setdefault(column, value)
    return rows


class PartitionsReadOncePerBatch:
    """Mixed into an event log whose ``batched_writes`` sets ``_local.session``."""

    _local: threading.local

    def _batch_partitions(self, partitions_def_name: str) -> tuple[list[str], set[str]] | None:
        if getattr(self._local, "session", None) is None:
            return None
        cache: dict[str, tuple[list[str], set[str]]] | None = getattr(
            self._local, "partitions", None
        )
        if cache is None:
            cache = self._local.partitions = {}
        if partitions_def_name not in cache:
            keys = list(super().get_dynamic_partitions(partitions_def_name))
            cache[partitions_def_name] = (keys, set(keys))
        return cache[partitions_def_name]

    def _end_batch_reads(self) -> None:
        self._local.partitions = None

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        cached = self._batch_partitions(partitions_def_name)
        if cached is None:
            return super().get_dynamic_partitions(partitions_def_name)
        return list(cached[0])

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        cached = self._batch_partitions(partitions_def_name)
        if cached is None:
            return super().has_dynamic_partition(partitions_def_name, partition_key)
        return partition_key in cached[1]


class PlannedChecksSerializedOnce:
    """Mixed into an event log: a planned check's rows, one per partition of the run, share
    one serialization of the event.

    Dagster writes the same row for every partition a run plans the check for, serializing
    the whole event (its partitions included) again for each, so a run over ``n``
    partitions serializes ``n`` partitions ``n`` times. Here the event is serialized once;
    the rows are the same.
    """

    def _store_asset_check_evaluation_planned(
        self, event: EventLogEntry, event_id: int | None
    ) -> None:
        planned = event.get_dagster_event().event_specific_data
        subset = planned.partitions_subset
        keys = subset.get_partition_keys() if subset else [None]
        row = dict(
            asset_key=planned.asset_key.to_string(),
            check_name=planned.check_name,
            run_id=event.run_id,
            execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
            evaluation_event=serialize_value(event),
            evaluation_event_timestamp=self._event_insert_timestamp(event),
            evaluation_event_storage_id=event_id,
        )
        with self.index_connection() as conn:
            conn.execute(
                AssetCheckExecutionsTable.insert().values([{**row, "partition": k} for k in keys])
            )
