"""Rows kept by a trainer's process in Arrow files it reads memory-mapped (verl's live dataset).

Rows are appended, never rewritten in place: a row keeps its number for good, and the files
are read as one ``datasets`` table without copying a row.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import datasets
import pyarrow as pa
from datasets.table import InMemoryTable, MemoryMappedTable, concat_tables

BATCH_ROWS = 1_000  # rows read, measured and written at a time: what a load holds at once


class RowFiles:
    """Rows appended to Arrow files in ``folder``, memory-mapped and read as one table.

    A row keeps its number for good. The last two files are merged while the last is at
    least half the size of the one before (as a binary counter carries): a few files,
    each row rewritten a few times, and a small addition stays a small write.
    """

    def __init__(self, folder: Path, schema: pa.Schema):
        self.folder, self.schema = folder, schema
        self.info = datasets.DatasetInfo(features=datasets.Features.from_arrow_schema(schema))
        self.parts: list[tuple[Path, MemoryMappedTable]] = []
        self._files = 0

    def add(self, tables: Iterable[pa.Table]) -> int:
        """Append the rows of ``tables`` (one file); how many."""
        path, part = self._write(tables)
        if not part.num_rows:
            path.unlink()
            return 0
        self.parts.append((path, part))
        while len(self.parts) > 1 and 2 * self.parts[-1][1].num_rows >= self.parts[-2][1].num_rows:
            merged = self._write(table.table for _, table in self.parts[-2:])
            for old, _ in self.parts[-2:]:
                old.unlink()
            self.parts[-2:] = [merged]
        return part.num_rows

    def _write(self, tables: Iterable[pa.Table]) -> tuple[Path, MemoryMappedTable]:
        path = self.folder / f"rows-{self._files:06d}.arrow"
        self._files += 1
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, self.schema) as out:
            for table in tables:
                out.write_table(table, max_chunksize=BATCH_ROWS)
        return path, MemoryMappedTable.from_file(str(path))

    def dataset(self, fingerprint: str) -> datasets.Dataset:
        """Every row written, as one dataset (no row copied)."""
        if not self.parts:
            table = InMemoryTable(self.schema.empty_table())
        else:
            table = concat_tables([part for _, part in self.parts])
        return datasets.Dataset(table, info=self.info, fingerprint=fingerprint)
