"""The SQLite event log the repository's ``dagster.yaml`` names: Dagster's own, writing cheaper.

It changes how Dagster's ``SqliteEventLogStorage`` connects and commits, not what it writes:
one pooled engine per shard per process (``synchronous=NORMAL``, never shared across a
fork), a batch in one transaction per shard (each asset's latest-state row written once, at
its end, by ``batch.py``; a failed batch rolled back whole), a new run shard copied
from an empty one made once per Dagster version, a shard's schema stamp only read, the UI's
live view following the shard's ``-wal`` file too (why: docs/performance.md, "Dagster's
bookkeeping"). Without ``config: {base_dir: ...}`` it uses the instance's ``history/runs``,
where Dagster's own keeps the same files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster import DagsterInstance, Field, StringSource
from dagster._config.config_schema import UserConfigSchema
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
    SqliteEventLogStorageWatchdog,
)
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from dagster.version import __version__ as dagster_version
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from . import enable_event_batches
from .batch import (
    PartitionsReadOncePerBatch,
    PlannedChecksSerializedOnce,
    batch_writable,
    store_rows,
    write_asset_rows,
)

RUN_SHARD_ENGINES = 8  # run shards with an open engine per process (the index has its own)


def _pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _stamped(engine: Engine) -> bool:
    """Whether Dagster finished setting up this database: its schema stamp, written last."""
    with engine.connect() as conn:
        try:
            stamp = conn.execute(db.text("SELECT version_num FROM alembic_version")).first()
        except db.exc.OperationalError:  # no such table
            return False
    return stamp is not None and bool(stamp[0])


class _WalWatchdog(SqliteEventLogStorageWatchdog):
    """Dagster's watch of a run shard, also woken by writes to the shard's ``-wal`` file."""

    def __init__(self, storage: SqliteEventLogStorage, run_id: str, callback, cursor):
        super().__init__(storage, run_id, callback, cursor)
        self._paths = (self._log_path, f"{self._log_path}-wal")
        self._patterns = list(self._paths)

    def on_modified(self, event) -> None:
        if event.src_path in self._paths:
            self._process_log()

    def on_created(self, event) -> None:
        self.on_modified(event)


class StatepoolSqliteEventLogStorage(
    PartitionsReadOncePerBatch, PlannedChecksSerializedOnce, SqliteEventLogStorage
):
    """``SqliteEventLogStorage`` with kept connections and one transaction per batch."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        enable_event_batches()
        # Set before Dagster's constructor, which connects to a new index shard.
        self._engine_lock = threading.Lock()
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_pid = os.getpid()
        self._forked_engines: list[OrderedDict[str, Engine]] = []
        self._tables: set[str] = set()
        self._asset_key_index_cols = False
        self._local = threading.local()
        self._inst_data = inst_data
        if base_dir is not None:
            super().__init__(base_dir, inst_data)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Any
    ) -> StatepoolSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def register_instance(self, instance: DagsterInstance) -> None:
        """Without a ``base_dir``, the instance's: ``<DAGSTER_HOME>/history/runs``, as Dagster's.

        (Dagster's constructor resets the instance reference: it runs first.)
        """
        if not hasattr(self, "_base_dir"):
            base_dir = os.path.join(instance.root_directory, "history", "runs")
            SqliteEventLogStorage.__init__(self, base_dir, self._inst_data)
        super().register_instance(instance)

    def _engine(self, shard: str) -> Engine:
        with self._engine_lock:
            if self._engines_pid != os.getpid():
                # Inherited from the parent: kept referenced, never closed or used here.
                self._forked_engines.append(self._engines)
                self._engines, self._engines_pid = OrderedDict(), os.getpid()
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            engine = db.create_engine(
                self.conn_string_for_shard(shard),
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
            )
            db.event.listen(engine, "connect", _pragmas)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            self._engines[shard] = engine
            runs = [name for name in self._engines if name != INDEX_SHARD_NAME]
            for name in runs[:-RUN_SHARD_ENGINES]:
                self._engines.pop(name).dispose()
            return engine

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        path = engine.url.database
        if path and os.path.exists(path) and _stamped(engine):
            # Set up already: Dagster's own check would load every migration script it has
            # (for each shard, in each process) only to find the stamp and do nothing more.
            return
        if (
            path
            and not for_index_shard
            and path != self.path_for_shard(INDEX_SHARD_NAME)
            and not os.path.exists(path)
            and self._copy_empty_shard(path)
        ):
            return
        super()._initdb(engine, for_index_shard)

    def _copy_empty_shard(self, path: str) -> bool:
        """Make a new run shard as a copy of an empty one Dagster made; False if it cannot.

        Dagster builds a shard with a hundred DDL statements, each its own commit before the
        shard is switched to WAL: half a second or more for every run. The copy is of a shard
        built by Dagster's own ``_initdb`` once per Dagster version, kept beside the shards
        (a hidden file, not ``*.db``, so never taken for a run's).
        """
        template = os.path.join(self._base_dir, f".statepool-empty-shard-{dagster_version}.sqlite")
        part = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
        try:
            if not os.path.exists(template):
                engine = db.create_engine(f"sqlite:///{part}", poolclass=NullPool)
                SqliteEventLogStorage._initdb(self, engine)
                engine.dispose()  # the last connection closed: WAL checkpointed into the file
                os.replace(part, template)
            shutil.copyfile(template, part)
            with contextlib.suppress(FileExistsError):
                os.link(part, path)  # never over a shard another process made meanwhile
            return True
        except OSError:  # no hard links here, say: Dagster's own way
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)

    def _dispose_engines(self) -> None:
        with self._engine_lock:
            if self._engines_pid == os.getpid():
                for engine in self._engines.values():
                    engine.dispose()
            self._engines = OrderedDict()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        session: dict[str, Connection] | None = getattr(self._local, "session", None)
        if session is not None:
            if shard not in session:
                conn = self._engine(shard).connect()
                conn.begin()
                session[shard] = conn
            yield session[shard]
            return
        with self._db_lock, self._engine(shard).connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def batched_writes(self) -> Iterator[None]:
        """Everything this thread stores inside, one transaction per shard, committed at the end;
        each asset's row written once, last.

        Nested uses join the outermost. On an error nothing of it is kept.
        """
        if getattr(self._local, "session", None) is not None:
            yield
            return
        session: dict[str, Connection] = {}
        self._local.session = session
        self._local.asset_rows = []
        try:
            yield
            write_asset_rows(self, self._local.asset_rows)
        except BaseException:
            self._end_session()
            for conn in session.values():
                conn.rollback()
                conn.close()
            raise
        self._end_session()
        try:
            for conn in session.values():
                conn.commit()
        finally:
            for conn in session.values():
                conn.close()

    def _end_session(self) -> None:
        self._local.session = self._local.asset_rows = None
        self._end_batch_reads()

    def store_event(self, event: EventLogEntry) -> None:
        """Dagster's ``store_event``; inside :meth:`batched_writes`, an asset event's asset row
        is left to the end of the batch (``batch.py``)."""
        if getattr(self._local, "session", None) is not None and batch_writable([event]):
            self._local.asset_rows.extend(store_rows(self, [event]))
            return
        super().store_event(event)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Each event as ``store_event`` stores it (each asset's row once: ``batch.py``),
        all in one transaction per shard."""
        with self.batched_writes():
            for event in events:
                self.store_event(event)

    def has_table(self, table_name: str) -> bool:
        # Asked for every stored materialization; a table, once there, stays.
        if table_name not in self._tables:
            engine = self._engine(INDEX_SHARD_NAME)
            with engine.connect() as conn:
                if engine.dialect.has_table(conn, table_name):
                    self._tables.add(table_name)
        return table_name in self._tables

    def _has_asset_key_index_cols_on_connection(self, conn: Connection) -> bool:
        # Asked for every stored asset event (a schema read); columns, once there, stay.
        if not self._asset_key_index_cols:
            self._asset_key_index_cols = super()._has_asset_key_index_cols_on_connection(conn)
        return self._asset_key_index_cols

    def watch(self, run_id: str, cursor: str | None, callback) -> None:
        if not self._obs:
            from watchdog.observers import Observer

            self._obs = Observer()
            self._obs.start()
        watchdog = _WalWatchdog(self, run_id, callback, cursor)
        self._watchers[run_id][callback] = (
            watchdog,
            self._obs.schedule(watchdog, self._base_dir, recursive=True),
        )

    def upgrade(self) -> None:
        self._dispose_engines()
        super().upgrade()
        self._dispose_engines()

    def wipe(self) -> None:
        # Its run shards' files are deleted: no connection may outlive them.
        self._dispose_engines()
        super().wipe()
        self._dispose_engines()

    def dispose(self) -> None:
        super().dispose()
        self._dispose_engines()


def finish_sqlite_setup(instance) -> None:
    """Create what a process killed while Dagster set up its SQLite event log left out.

    Dagster creates the event log's ``index.db`` tables only when the file is new, so a
    command killed in that first second leaves an instance on which every later command fails
    ("requires the dynamic partitions table ... run `dagster instance migrate`"). The schema
    version stamp (``alembic_version``) is the setup's last step, so without it the setup was
    cut short. Dagster's own first-connection setup is idempotent (it creates only missing
    tables, then stamps), as are its data migrations, so running them again finishes the job.
    """
    storage = instance.event_log_storage
    if not isinstance(storage, SqliteEventLogStorage) or storage.has_table("alembic_version"):
        return
    with storage.index_connection():
        pass
    storage.reindex_events()
    storage.reindex_assets()
