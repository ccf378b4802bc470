"""Single-row checkpoints gathered, then turned into Arrow together: one conversion per column.

Turning rows into an Arrow table costs a fixed amount a column, however few the rows; a
batch of checkpoints pays it once. Each checkpoint is then a slice of the batch's table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa

from .part_writer import SLAB_BYTES, SLAB_ROWS
from .rows import LARGE, rows_table

# A batch is gathered up to a row group's size (a row of LARGE text or more alone).


def row_bytes(row: tuple) -> int:
    return sum(len(v) for v in row if isinstance(v, str | bytes))


class Taken(NamedTuple):
    name: str
    table: pa.Table
    key: str
    info: dict[str, Any]
    data: int  # its share of the batch's buffers


class RowBatch:
    """Rows of one table's schema, by checkpoint name, until :meth:`take`."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows: list[tuple] = []
        self.entries: list[tuple[str, str, dict[str, Any]]] = []
        self.names: set[str] = set()
        self.size = 0

    def add(self, name: str, row: tuple, key: str, info: dict[str, Any], size: int) -> bool:
        """Gather ``row``; whether the batch is now full."""
        self.rows.append(row)
        self.entries.append((name, key, info))
        self.names.add(name)
        self.size += size
        return len(self.rows) >= SLAB_ROWS or self.size >= SLAB_BYTES

    def discard(self, name: str) -> None:
        if name in self.names:
            at = next(i for i, entry in enumerate(self.entries) if entry[0] == name)
            del self.rows[at], self.entries[at]
            self.names.discard(name)

    def take(self) -> Iterator[Taken]:
        """Each gathered checkpoint as a one-row slice of one table, in the order added."""
        if not self.rows:
            return
        rows, entries = self.rows, self.entries
        self.rows, self.entries, self.names, self.size = [], [], set(), 0
        table = rows_table(self.schema, rows)  # empties ``rows``
        share = table.get_total_buffer_size() // len(entries)
        for i, (name, key, info) in enumerate(entries):
            yield Taken(name, table.slice(i, 1), key, info, share)


__all__ = ["LARGE", "RowBatch", "Taken", "row_bytes"]
