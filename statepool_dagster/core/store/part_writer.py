"""One new part file being written: row groups appended in order, published whole at close."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, is_local
from .atomic import temp_sibling
from .part_files import ROWS_META, writer_options

BUFFER = 256 << 10  # bytes gathered before a write to a local part (larger ones go straight)


class PartWriter:
    """Writes ``folder/file``; nobody sees it before :meth:`close`.

    On a local disk it is written under a hidden temporary name and renamed into place;
    an object store publishes a file whole when it is closed. ``rows`` holds each row
    group's footer entry (``[checkpoint, key, info]``), written into the footer at close.
    """

    def __init__(self, folder: AnyPath, file: str, schema: pa.Schema) -> None:
        self.file = file
        self.schema = schema
        self.rows: list[list[Any]] = []
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

    def append(self, table: pa.Table, entry: list[Any], rows: int | None = None) -> int:
        """Write ``table`` as one row group (of ``rows`` rows); its group number."""
        rows = max(1, len(table) if rows is None else rows)
        self._writer.write_table(self.conformed(table), row_group_size=rows)
        self.rows.append(entry)
        return len(self.rows) - 1

    def conformed(self, table: pa.Table) -> pa.Table:
        """``table`` in the part's schema, without metadata (a cast only where it differs)."""
        if table.schema.metadata:
            table = table.replace_schema_metadata(None)
        return table if table.schema.equals(self.schema) else table.cast(self.schema)

    def close(self) -> None:
        """Write the footer and publish the file under its name."""
        self._writer.add_key_value_metadata({ROWS_META.decode(): json.dumps(self.rows)})
        self._writer.close()
        if is_local(self._final):
            self._sink.close()
            os.replace(self._target, self._final)
        else:
            self._target.close()
