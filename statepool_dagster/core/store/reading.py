"""A run's table, read by anyone: exports, readers, checks, the IO manager.

Readers take no lock. A save may remove a part (pruned or merged) between a reader's
listing and its read; the part's rows are then already in a newer part, so the table is
read again.

``CheckpointBatches`` reads a run's table a batch of checkpoints at a time, for the
whole-pool commands: ``RunTable.read`` gives a whole run at once and ``RunTable.read_part``
one checkpoint per call (a call costs about as much as reading a small checkpoint); it reads
consecutive checkpoints of one part file in one call, up to ``batch`` at a time, and keeps
each part file open until closed: memory follows the batch, never the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, is_local
from .layout import StoreLayout
from .part_files import READ_ATTEMPTS, read_spans
from .parts import RunTable

T = TypeVar("T")


def _retried(folder: AnyPath, schema: pa.Schema, read: Callable[[RunTable], T]) -> T:
    """``read`` of the run table in ``folder``, again if a part went meanwhile."""
    for attempt in range(READ_ATTEMPTS):
        table = None
        try:
            table = RunTable(folder, schema)
            return read(table)
        except FileNotFoundError:
            if attempt == READ_ATTEMPTS - 1:
                raise
        finally:
            if table is not None:
                table.close()
    raise AssertionError("unreachable")


def read_table(folder: AnyPath, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """A run table's current rows as one table, in checkpoint order (read again if a part
    went meanwhile)."""
    return _retried(folder, schema, lambda table: table.read(columns))


def read_run_infos(layout: StoreLayout, asset: str, run: str) -> list[tuple[str, dict[str, Any]]]:
    """Each checkpoint of one run's table of ``asset`` with its small facts (``info``), in
    checkpoint order: from the table's index, its rows unread (a footer where the index
    is behind a part)."""
    from .schemas import SCHEMAS

    return _retried(
        layout.table(asset, run),
        SCHEMAS[asset],
        lambda table: [(name, table.parts[name].info) for name in table.names()],
    )


def read_run_table(
    layout: StoreLayout, asset: str, run: str, columns: list[str] | None = None
) -> pa.Table:
    """One run's table of ``asset`` from the store, as one Arrow table (empty if never built)."""
    from .schemas import SCHEMAS

    return read_table(layout.table(asset, run), SCHEMAS[asset], columns)


class CheckpointBatches:
    """Reads ``table``'s checkpoints (as listed when it was loaded) in batches."""

    def __init__(self, table: RunTable):
        self.table = table
        self._open: dict[str, pq.ParquetFile] = {}

    def _file(self, name: str) -> pq.ParquetFile:
        parquet = self._open.get(name)
        if parquet is None:
            path = self.table.folder / name
            if is_local(path):
                # Pre-buffering gathers a remote file's reads; a local file's column chunks
                # are read as cheaply where they lie, without handing them to an IO thread.
                parquet = pq.ParquetFile(path, pre_buffer=False)
            else:
                parquet = pq.ParquetFile(path.open("rb"))
            self._open[name] = parquet
        return parquet

    def names(self) -> list[str]:
        return self.table.names()

    def read(self, names: list[str], columns: list[str]) -> pa.Table:
        """The rows of ``names`` (in that order); a missing part file raises FileNotFoundError."""
        tables: list[pa.Table] = []
        run: list[tuple[int, int, int]] = []
        file = None
        for name in names:
            part = self.table.parts[name]
            if part.file != file and run:
                tables.append(read_spans(self._file(file), run, columns))
                run = []
            file = part.file
            run.append(part.span())
        if run:
            tables.append(read_spans(self._file(file), run, columns))
        wanted = pa.schema([self.table.schema.field(c) for c in columns])
        if not tables:
            return wanted.empty_table()
        tables = [t.replace_schema_metadata(None) for t in tables]
        return pa.concat_tables([t if t.schema == wanted else t.cast(wanted) for t in tables])

    def batches(
        self, columns: list[str], batch: int, skip: set[str] = frozenset()
    ) -> Iterator[tuple[list[str], pa.Table]]:
        """``(checkpoint names, their rows)``, ``batch`` checkpoints at a time, in order."""
        names = [n for n in self.names() if n not in skip]
        for start in range(0, len(names), batch):
            chunk = names[start : start + batch]
            yield chunk, self.read(chunk, columns)

    def close(self) -> None:
        for parquet in self._open.values():
            with contextlib.suppress(Exception):
                parquet.close(force=True)
        self._open.clear()
        self.table.close()
