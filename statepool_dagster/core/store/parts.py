"""A run's table as a folder of Parquet parts whose row groups hold checkpoints.

``<asset>/<run>/p00000003.parquet`` is what one build wrote: the checkpoints (or episode
batches) it built, a few dozen to a row group. A run grown by one checkpoint adds a small
part and rewrites nothing it did not change; the newest checkpoint gets a part of its own
(the next growth changes it). Small parts are merged eight of a size at a time.
``pyarrow.dataset``, pandas and ``datasets`` read the folder as one table.

Each part's footer names the checkpoint, input key and small facts (``info``) of every
checkpoint, and where its rows are, so the parts are the truth. ``.index.json`` caches them
with each part's size and mtime, plus the table's marks. Where the cache does not match a
part (a kill -9 between the two, a hand edit) its footer is read instead, and a checkpoint
found in two parts is taken from the newer one, the older copy dropped at the next save.

Single-row checkpoints are gathered (:class:`RowBatch`) and turned into Arrow together:
turning rows into an Arrow table costs a fixed amount a column however few the rows, so a
batch pays it once, and each checkpoint is a slice of the batch's table. Parts are dropped
and merged by copying row groups to a new part, never in place.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, Stamp, file_stamp, is_local, open_ranged
from ..names import TABLE_INDEX
from .atomic import write_bytes_atomic
from .part_files import (
    MERGE,
    NEXT_PART,
    OPEN_PARTS,
    PART_ROWS,
    PARTS_KEY,
    RECENT,
    SLAB_BYTES,
    SLAB_ROWS,
    SUFFIX,
    Part,
    PartWriter,
    decode_index,
    encode_index,
    file_order,
    footer_rows,
    list_parts,
    mergeable,
    read_spans,
    sweep,
    tier,
)
from .rows import LARGE, rows_table


def row_bytes(row: tuple) -> int:
    return sum(len(v) for v in row if isinstance(v, str | bytes))


class Taken(NamedTuple):
    name: str
    table: pa.Table
    key: str
    info: dict[str, Any]
    data: int  # its share of the batch's buffers


class RowBatch:
    """Rows of one table's schema, by checkpoint name, until :meth:`take`.

    A batch is gathered up to a row group's size (a row of ``LARGE`` text or more alone).
    """

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


class RunTable:
    """One run's table of one asset: load it, write or drop checkpoints, then ``save()``."""

    def __init__(self, folder: AnyPath, schema: pa.Schema, newest_apart: bool = True):
        self.folder = folder
        self.schema = schema
        # Not for a table whose checkpoints never change once the next one exists (snapshots).
        self.newest_apart = newest_apart
        self.parts: dict[str, Part] = {}
        self.marks: dict[str, Any] = {}
        self._files: dict[str, list[list[Any]]] = {}  # part file -> its checkpoints' entries
        self._spans: dict[str, list[list[int]] | None] = {}  # part file -> where their rows are
        self._stale: dict[str, set[int]] = {}  # part file -> entries to drop
        self._open: dict[str, pq.ParquetFile] = {}
        self._writer: PartWriter | None = None
        self._held: tuple[str, pa.Table, int | None] | None = None
        self._rows = RowBatch(schema)
        self._dirty = False
        self._index_stamp = self._stamp()  # before reading: never newer
        self._load()

    def _load(self) -> None:
        try:
            cached = decode_index((self.folder / TABLE_INDEX).read_bytes())
        except (OSError, ValueError):
            cached = {}
        # An index of another shape (a hand edit, another tool) is no index: the parts' own
        # footers are read instead, as for a table without one.
        cached = cached if isinstance(cached, dict) else {}
        marks, known = cached.get("marks"), cached.get(PARTS_KEY)
        self.marks = dict(marks) if isinstance(marks, dict) else {}
        known = known if isinstance(known, dict) else {}
        listing = list_parts(self.folder)
        for name in sorted(listing, key=file_order):
            entry = known.get(name)
            if _indexed(entry) and entry["stamp"] == listing[name]:
                rows, spans = entry["rows"], entry.get("spans")
            else:
                rows, spans = footer_rows(functools.partial(self._file, name))
                self._dirty = True
            self._files[name], self._spans[name] = rows or [], spans
            if rows is None:  # not a part of ours: dropped at the next save
                self._stale[name] = {-1}
                continue
            for at, (checkpoint, key, info) in enumerate(rows):
                old = self.parts.get(checkpoint)
                if old is not None:  # in two parts (an interrupted save): the newer wins
                    self._stale.setdefault(old.file, set()).add(old.entry)
                part = self.parts[checkpoint] = Part(key, info)
                part.place(name, at, None if spans is None else spans[at])
        if set(known) - set(listing):
            self._dirty = True

    def _file(self, name: str) -> pq.ParquetFile:
        parquet = self._open.pop(name, None)
        if parquet is None:
            if len(self._open) >= OPEN_PARTS:  # the least recently used one goes
                with contextlib.suppress(Exception):
                    self._open.pop(next(iter(self._open))).close(force=True)
            path = self.folder / name
            parquet = pq.ParquetFile(path if is_local(path) else open_ranged(path))
        self._open[name] = parquet  # most recently used last
        return parquet

    def close(self) -> None:
        """Close the part files this table has open (it opens them again when needed)."""
        for parquet in self._open.values():
            with contextlib.suppress(Exception):
                parquet.close(force=True)  # an object-store file it did not open too
        self._open.clear()

    def names(self) -> list[str]:
        return sorted(self.parts)

    def read_part(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """One checkpoint's rows."""
        if name in self._rows.names:
            self._take_rows()
        if self._held is not None and self._held[0] == name:
            table = self._held[1]
            return table.select(columns) if columns else table
        part = self.parts[name]
        recent = RECENT.get((str(self.folder), name, part.key))
        if recent is not None:
            return recent.select(columns) if columns else recent
        if part.file is None or (self._writer and part.file == self._writer.file):
            self._finish_writer()
            part = self.parts[name]
        return read_spans(self._file(part.file), [part.span()], columns)

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """Every checkpoint as one table, in checkpoint order (empty, with the schema, if none).

        Each part file is read in one call (its current row groups); a table built over
        several builds is then put back in checkpoint order.
        """
        self._take_rows()
        if self._held is not None or self._writer is not None:  # mid-build: one by one
            return self._concat([self.read_part(n, columns) for n in self.names()], columns)
        groups: dict[str, list[tuple[str, tuple[int, int, int]]]] = {}
        for name in self.names():
            part = self.parts[name]
            groups.setdefault(part.file, []).append((name, part.span()))
        tables, order = [], []
        for file in sorted(groups, key=file_order):
            wanted = groups[file]
            tables.append(read_spans(self._file(file), [s for _, s in wanted], columns))
            order.extend(name for name, _ in wanted)
            # Read once, in order: its footer (an entry per row group) need not stay parsed.
            with contextlib.suppress(Exception):
                self._open.pop(file).close(force=True)
        table = self._concat(tables, columns)
        if order == sorted(order) or table.num_rows == 0:
            return table
        keys = [k for k in ("version", "line") if k in table.column_names]
        if not keys:  # without the version column, read checkpoint by checkpoint
            return self._concat([self.read_part(n, columns) for n in self.names()], columns)
        return table.sort_by([(k, "ascending") for k in keys])

    def head(self, columns: list[str], rows: int = 10) -> pa.Table:
        """The first ``rows`` rows, reading only the checkpoints that hold them."""
        tables, count = [], 0
        for name in self.names():
            if count >= rows:
                break
            tables.append(self.read_part(name, columns))
            count += tables[-1].num_rows
        return self._concat(tables, columns).slice(0, rows)

    def _concat(self, tables: list[pa.Table], columns: list[str] | None) -> pa.Table:
        wanted = (
            self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
        )
        if not tables:
            return wanted.empty_table()
        return pa.concat_tables([_conform(t, wanted) for t in tables])

    def write(
        self, name: str, table: pa.Table, key: str, info: dict[str, Any], data: int | None = None
    ) -> None:
        """Store one checkpoint's rows (replacing its old ones at ``save``)."""
        self._forget(name)
        if self._held is not None:
            self._append(*self._held)
        self._held = (name, table, data)
        self.parts[name] = Part(key, info)
        RECENT.put((str(self.folder), name, key), table, data)
        self._dirty = True

    def write_row(self, name: str, row: tuple, key: str, info: dict[str, Any]) -> None:
        """:meth:`write` of a checkpoint of one row (a named row of the table's columns),
        turned into Arrow with the next ones (a row of large text alone, as it is)."""
        self._forget(name)
        self.parts[name] = Part(key, info)
        self._dirty = True
        size = row_bytes(row)
        if size >= LARGE:
            self._take_rows()
        if self._rows.add(name, row, key, info, size) or size >= LARGE:
            self._take_rows()

    def _take_rows(self) -> None:
        for taken in self._rows.take():
            self.write(*taken)

    def drop(self, name: str) -> None:
        self._forget(name)
        self.parts.pop(name, None)
        self._dirty = True

    def _forget(self, name: str) -> None:
        """The stored rows of ``name`` are no longer current."""
        self._rows.discard(name)
        if self._held is not None and self._held[0] == name:
            self._held = None
        part = self.parts.get(name)
        if part is not None and part.file is not None:
            self._stale.setdefault(part.file, set()).add(part.entry)

    def _append(self, name: str, table: pa.Table, data: int | None = None) -> None:
        if self._writer is not None and len(self._writer.rows) >= PART_ROWS:
            self._finish_writer()
        writer = self._writer or self._start_writer()
        part = self.parts[name]
        span = writer.append(table, [name, part.key, part.info], data)
        part.place(writer.file, len(writer.rows) - 1, span)

    def _start_writer(self) -> PartWriter:
        # Never a number used before (the highest part may have been pruned away): a
        # lock-free reader that listed the old file must not find other rows under its name.
        highest = max((file_order(n)[0] for n in self._files), default=0)
        seq = max(highest + 1, int(self.marks.get(NEXT_PART, 1)))
        self.mark(**{NEXT_PART: seq + 1})
        self._writer = PartWriter(self.folder, f"p{seq:08d}{SUFFIX}", self.schema)
        self._files[self._writer.file] = self._writer.rows
        self._spans[self._writer.file] = self._writer.spans
        return self._writer

    def _finish_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def mark(self, **marks: Any) -> None:
        if any(self.marks.get(k) != v for k, v in marks.items()):
            self.marks.update(marks)
            self._dirty = True

    def save(self) -> None:
        """Write out the held checkpoint (a part of its own), prune old parts, then the index."""
        self._take_rows()
        if self._held is not None:
            if self.newest_apart:
                self._finish_writer()
            self._append(*self._held)
            self._held = None
        self._finish_writer()
        for file, groups in sorted(self._stale.items()):
            self._prune(file, groups)
        self._stale.clear()
        self._compact()
        self.close()
        listing = sweep(self.folder)
        if not self._dirty and (self.folder / TABLE_INDEX).exists():
            self._index_stamp = self._stamp()
            return
        listing = list_parts(self.folder) if listing is None else listing
        files = {
            name: {"stamp": listing[name], "rows": rows, "spans": self._spans.get(name)}
            for name, rows in self._files.items()
            if name in listing
        }
        if self.parts or files or self.marks:
            write_bytes_atomic(self.folder / TABLE_INDEX, encode_index(self.marks, files))
        self._dirty = False
        self._index_stamp = self._stamp()

    def unchanged(self) -> bool:
        """Whether the folder still holds what this table says: nothing pending, the index as
        this table last read or wrote it (a local store; the run's lock keeps writers out)."""
        if self._dirty or self._held or self._writer or self._stale or self._rows.rows:
            return False
        return self._index_stamp is not None and self._stamp() == self._index_stamp

    def _stamp(self) -> Stamp | None:
        # Only a local disk's stamp is trusted to say the index is as it was: through
        # fsspec (``None``) the table is always read again.
        index = self.folder / TABLE_INDEX
        return file_stamp(index) if is_local(index) else None

    def _prune(self, file: str, groups: set[int]) -> None:
        """Drop entries ``groups`` of ``file``: its current checkpoints move to a new part, then
        it goes.

        Never rewritten in place, so a reader holding its group numbers never gets other
        rows; the copy goes one row group at a time; a kill between the two leaves both,
        and the newer wins when the table is next loaded.
        """
        self._move({file: groups})

    def _compact(self) -> None:
        """Merge small parts of a size, :data:`MERGE` at a time, into one (tiered, as an LSM tree).

        A run grown one checkpoint at a time adds a part per growth; merged this way it
        keeps at most ``MERGE - 1`` parts per size tier (tiers grow by ``MERGE``×), and each
        row is copied once per tier, never the run at each growth. Tiers are merged while
        the result stays within :data:`PART_ROWS` (parts of 1–7 rows into 8–63, those into
        64–511), so such a run keeps about n / 64 files. The part holding the newest
        checkpoint is left alone: the next growth replaces it.
        """
        newest = max(self.parts, default=None)
        while True:
            tiers: dict[int, list[str]] = {}
            for file, rows in self._files.items():
                if rows and mergeable(len(rows)) and all(row[0] != newest for row in rows):
                    tiers.setdefault(tier(len(rows)), []).append(file)
            full = [files for files in tiers.values() if len(files) >= MERGE]
            if not full:
                return
            self._move({file: set() for file in sorted(full[0], key=file_order)[:MERGE]})

    def _move(self, sources: dict[str, set[int]]) -> None:
        """The current checkpoints of ``sources`` (less each one's dropped entries) go to one new
        part, in order; then the sources are removed."""
        moved = False
        for file, groups in sorted(sources.items(), key=lambda item: file_order(item[0])):
            rows = self._files.get(file, [])
            if -1 in groups:
                continue
            source, read = None, (-1, None)
            for at, row in enumerate(rows):
                part = self.parts.get(row[0])
                if at in groups or part is None or (part.file, part.entry) != (file, at):
                    continue  # dropped, or stored again elsewhere
                writer = self._writer if moved else self._start_writer()
                moved = True
                source = source or self._file(file)
                if read[0] != part.group:  # a row group is read once for its checkpoints
                    read = (part.group, source.read_row_group(part.group, use_threads=False))
                group = read[1]
                rows_of = group.num_rows - part.offset if part.rows < 0 else part.rows
                share = group.get_total_buffer_size() * rows_of // max(group.num_rows, 1)
                span = writer.append(group.slice(part.offset, rows_of), row, share)
                part.place(writer.file, len(writer.rows) - 1, span)
        if moved:
            self._finish_writer()
        self.close()
        self._dirty = True
        for file in sources:
            (self.folder / file).unlink(missing_ok=True)
            self._files.pop(file, None)
            self._spans.pop(file, None)


def _indexed(entry: Any) -> bool:
    """Whether ``entry`` has the shape the index gives a part: its stamp, its rows
    (checkpoint, key, info) and their spans (or none)."""
    if not isinstance(entry, dict) or "stamp" not in entry:
        return False
    rows, spans = entry.get("rows"), entry.get("spans")
    return (
        isinstance(rows, list)
        and all(isinstance(r, list) and len(r) == 3 and isinstance(r[2], dict) for r in rows)
        and (spans is None or (isinstance(spans, list) and len(spans) == len(rows)))
    )


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``, no metadata: cast only where it differs (a cast costs even
    when nothing changes)."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    return table.replace_schema_metadata(None).cast(schema)
