"""One new part file being written: checkpoints appended in order, gathered into row groups of
up to :data:`SLAB_ROWS` checkpoints (or :data:`SLAB_BYTES`), published whole at close; and
the cache of the parts this process wrote last (:data:`RECENT`), read back by the next stage."""

from __future__ import annotations

import contextlib
import json
import os
from collections import OrderedDict
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, is_local
from .atomic import temp_sibling
from .part_files import ROWS_META, SPANS_META, writer_options
from .rows import note_written

BUFFER = 256 << 10  # bytes gathered before a write to a local part (larger ones go straight)
# A row group costs a fixed amount a column however small: checkpoints share one, up to
# these sizes (what reading one checkpoint back from disk reads at most).
SLAB_ROWS = 32
SLAB_BYTES = 1 << 20


class PartWriter:
    """Writes ``folder/file``; nobody sees it before :meth:`close`.

    On a local disk it is written under a hidden temporary name and renamed into place;
    an object store publishes a file whole when it is closed. ``rows`` holds each
    checkpoint's footer entry (``[checkpoint, key, info]``) and ``spans`` where its rows are
    (``[row group, first row, rows]``), both written into the footer at close.
    """

    def __init__(self, folder: AnyPath, file: str, schema: pa.Schema) -> None:
        self.file = file
        self.schema = schema
        self.rows: list[list[Any]] = []
        self.spans: list[list[int]] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = self._groups = 0
        self._final = folder / file
        if is_local(self._final):
            self._target: Any = temp_sibling(self._final)
            # Buffered: each column chunk of a small row group is not a write call of its own.
            try:
                self._sink = pa.output_stream(str(self._target), buffer_size=BUFFER)
            except FileNotFoundError:  # the table's first part
                self._final.parent.mkdir(parents=True, exist_ok=True)
                self._sink = pa.output_stream(str(self._target), buffer_size=BUFFER)
            sink: Any = self._sink
        else:
            with contextlib.suppress(FileExistsError):
                self._final.parent.mkdir(parents=True, exist_ok=True)
            self._target = self._final.open("wb")
            sink = self._target
        self._writer = pq.ParquetWriter(sink, schema, **writer_options(schema))

    def append(self, table: pa.Table, entry: list[Any], size: int | None = None) -> list[int]:
        """Add ``table`` (``size``: its bytes, if known) as one checkpoint; its span (row
        group, first row, rows)."""
        if self._pending and (len(self._pending) >= SLAB_ROWS or self._pending_bytes >= SLAB_BYTES):
            self.flush()
        table = self.conformed(table)
        span = [self._groups, self._pending_rows, table.num_rows]
        self._pending.append(table)
        self._pending_rows += table.num_rows
        size = table.get_total_buffer_size() if size is None else size
        self._pending_bytes += size
        note_written(size)
        self.rows.append(entry)
        self.spans.append(span)
        return span

    def flush(self) -> None:
        """Write the gathered checkpoints as one row group."""
        if not self._pending:
            return
        pending = self._pending
        table = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
        if len(pending) > 1 and self._pending_bytes <= SLAB_BYTES:
            # Parquet writes each chunk of a column on its own: a slice per checkpoint costs
            # about twice the write; copying the (small) slices together costs less.
            table = table.combine_chunks()
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        self._groups += 1

    def conformed(self, table: pa.Table) -> pa.Table:
        """``table`` in the part's schema, without metadata (a cast only where it differs)."""
        if table.schema.metadata:
            table = table.replace_schema_metadata(None)
        return table if table.schema.equals(self.schema) else table.cast(self.schema)

    def close(self) -> None:
        """Write the footer and publish the file under its name."""
        self.flush()
        self._writer.add_key_value_metadata(
            {ROWS_META.decode(): _json(self.rows), SPANS_META.decode(): _json(self.spans)}
        )
        self._writer.close()
        if is_local(self._final):
            self._sink.close()
            os.replace(self._target, self._final)
        else:
            self._target.close()


def _json(value: Any) -> str:
    """A footer entry's JSON (msgspec: faster than ``json`` on these lists)."""
    try:
        return msgspec.json.encode(value).decode("utf-8")
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError):  # e.g. a huge integer
        return json.dumps(value)


# Each Arrow buffer of a table costs C++ objects and padding beyond its bytes, a little less
# than this: a small checkpoint holds several times its data.
BUFFER_OVERHEAD = 768


def table_cost(table: pa.Table, data: int | None = None) -> int:
    """What a cached table holds: its buffers (``data``: a slice's share of them), plus the
    objects around each of them."""
    # Three a column (two for numbers: a little over), per chunk of the first.
    chunks = table.column(0).num_chunks if table.num_columns else 0
    buffers = 3 * table.num_columns * chunks
    if data is None:  # whole buffers, and far cheaper than ``nbytes``
        data = table.get_total_buffer_size()
    return data + 4096 + BUFFER_OVERHEAD * buffers


class RecentParts:
    """The checkpoints this process wrote last, up to a byte budget (a constant, not a run).

    The next stage of the same run reads them back from here instead of from disk: a
    states build right after its snapshots, prompts right after states. Entries are keyed
    by the checkpoint's input key, so a changed checkpoint never matches an old entry.
    """

    def __init__(self, budget: int = 64 << 20):
        self.budget = budget
        self._tables: OrderedDict[tuple[str, str, str], tuple[pa.Table, int]] = OrderedDict()
        self._size = 0

    def put(self, where: tuple[str, str, str], table: pa.Table, data: int | None = None) -> None:
        """Keep ``table`` (``data``: a slice's share of its table's buffers)."""
        old = self._tables.pop(where, None)
        if old is not None:
            self._size -= old[1]
        cost = table_cost(table, data)
        if cost > self.budget:
            return
        self._tables[where] = (table, cost)
        self._size += cost
        while self._tables and self._size > self.budget:
            _, (_, dropped) = self._tables.popitem(last=False)
            self._size -= dropped

    def get(self, where: tuple[str, str, str]) -> pa.Table | None:
        entry = self._tables.get(where)
        return None if entry is None else entry[0]


RECENT = RecentParts()
