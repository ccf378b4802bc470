"""What a part file is: its name, its footer, how it is written, its size tier; and the
table's ``.index.json`` (written and read fast: it grows with the run) and its stamp.
``parts.RunTable`` is what uses them.

A new part file is written by :class:`PartWriter`: checkpoints appended in order, gathered
into row groups of up to :data:`SLAB_ROWS` checkpoints (or :data:`SLAB_BYTES`), published
whole at close. :data:`RECENT` caches the parts this process wrote last, read back by the
next stage.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, Stamp, info_fields, is_local
from .atomic import temp_sibling
from .rows import note_written

SUFFIX = ".parquet"
# JSON: [[checkpoint, key, info], ...], one per checkpoint, and where each one's rows are,
# [[row group, first row, rows], ...]. Parts written before row groups held several
# checkpoints name theirs under LEGACY_ROWS_META, a row group each. New parts use new keys
# so that code of that time reads them as not its own (and rebuilds), never misplaces rows.
ROWS_META = b"statepool.checkpoints"
SPANS_META = b"statepool.spans"
LEGACY_ROWS_META = b"statepool.rows"
PART_FILE = re.compile(r"p(\d{8,})\.parquet")


# Columns whose cells can be large (a record, a library, a state, a prompt): only these
# are compressed.
COMPRESSED = frozenset(
    {"record", "question", "response", "library", "state", "prompt", "reference_ops"}
)


def writer_options(schema: pa.Schema) -> dict[str, Any]:
    """How parts are written: LZ4 (raw) for the large text columns only; no dictionary;
    statistics only for non-text columns.

    A row group holds few checkpoints, so per-row-group costs dominate: a zstd column
    chunk costs a set-up however small (LZ4 far less), and compressing an id or a number
    saves less than it costs; LZ4 on the text columns only trades a slightly larger store
    for less CPU per run. Dictionaries and min/max statistics of large text cells (a state,
    a prompt) cost much of the write and make the file larger; numeric statistics stay,
    for readers that filter on them. Both are also copies of a cell, of any size (a huge
    episode field). Data pages v2 are compressed straight from the encoder's buffer: one
    copy of a huge cell less.
    """
    numeric = [
        f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    ]
    return dict(
        compression={f.name: "lz4" if f.name in COMPRESSED else "none" for f in schema},
        use_dictionary=False,
        write_statistics=numeric or False,
        data_page_version="2.0",
    )


@functools.lru_cache(maxsize=1 << 14)
def part_name(version: int) -> str:
    """The checkpoint (or batch) name of ``version`` (int64); names sort in version order."""
    return f"v{version:019d}" if version >= 0 else f"n{version + 2**63:019d}"


def part_version(name: str) -> int:
    """The version a checkpoint name of :func:`part_name` stands for."""
    number = int(name[1:])
    return number if name[0] == "v" else number - 2**63


@dataclass(slots=True)
class Part:
    """Where a checkpoint's rows are stored, what they were built from, small facts."""

    key: str
    info: dict[str, Any] = field(default_factory=dict)
    file: str | None = None  # None: not yet written out
    group: int = -1  # its row group
    entry: int = -1  # its place in the file's footer entries
    offset: int = 0  # its first row in the row group
    rows: int = -1  # its rows (-1: the whole row group)

    def place(self, file: str, entry: int, span: list[int] | None) -> None:
        self.file, self.entry = file, entry
        self.group, self.offset, self.rows = span if span is not None else (entry, 0, -1)

    def span(self) -> tuple[int, int, int]:
        return self.group, self.offset, self.rows


def read_spans(
    parquet: pq.ParquetFile, spans: list[tuple[int, int, int]], columns: list[str] | None
) -> pa.Table:
    """The rows of ``spans`` (row group, first row, rows; -1: all) of one part, in that order:
    each row group read once, sliced only where the spans do not cover it whole."""
    groups = sorted({g for g, _, _ in spans})
    table = parquet.read_row_groups(groups, columns=columns, use_threads=False)
    meta = parquet.metadata
    start, at = {}, 0
    for g in groups:
        start[g] = at
        at += meta.row_group(g).num_rows
    pieces, whole, end = [], True, 0
    for g, offset, rows in spans:
        begin = start[g] + offset
        rows = meta.row_group(g).num_rows - offset if rows < 0 else rows
        whole = whole and begin == end
        end = begin + rows
        pieces.append((begin, rows))
    if whole and end == table.num_rows:
        return table
    if len(pieces) == 1:
        return table.slice(*pieces[0])
    return pa.concat_tables([table.slice(begin, rows) for begin, rows in pieces])


MERGE = 8  # parts of a size tier merged into one at a time
# Checkpoints a part holds at most: what a writer or an open footer keeps in memory (an
# entry per row group and per checkpoint) stays bounded however long the run.
PART_ROWS = 512
OPEN_PARTS = 4  # part files a table keeps open at once (each holds its footer)
NEXT_PART = "next_part"  # the table's mark: the number the next part file gets
READ_ATTEMPTS = 8  # a lock-free read of a table that lost a part meanwhile, tried again


def tier(rows: int) -> int:
    """The size tier of a part of ``rows`` checkpoints: 0 below MERGE, then one per ×MERGE."""
    tier = 0
    while rows >= MERGE:
        rows //= MERGE
        tier += 1
    return tier


def mergeable(rows: int) -> bool:
    """Whether a part of ``rows`` checkpoints is merged with ``MERGE - 1`` others of its tier:
    only while the result cannot exceed :data:`PART_ROWS`."""
    return MERGE ** (tier(rows) + 2) <= PART_ROWS


def file_order(file: str) -> tuple[int, str]:
    match = PART_FILE.fullmatch(file)
    return (int(match.group(1)), file) if match else (0, file)


def list_parts(folder: AnyPath) -> dict[str, str]:
    """``{part file: stamp}`` of the Parquet files in ``folder`` (temp files left out)."""
    if is_local(folder):
        return _scan_local(folder, remove_temps=False)
    found: dict[str, str] = {}
    try:
        infos = folder.fs.ls(folder.path, detail=True, refresh=True)
    except (FileNotFoundError, NotADirectoryError):
        return found
    except TypeError:  # a backend without listings-cache refresh
        infos = folder.fs.ls(folder.path, detail=True)
    for info in infos:
        name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
        if name.endswith(SUFFIX) and not name.startswith("."):
            # seconds as a float, not Stamp's nanoseconds: the form the indexes on object
            # stores already hold (another form would make every part there look changed)
            size, mtime, tag = info_fields(info)
            found[name] = f"{size}:{mtime}:{tag}"
    return found


def footer_rows(
    parquet: Callable[[], pq.ParquetFile],
) -> tuple[list[list[Any]] | None, list[list[int]] | None]:
    """``[checkpoint, key, info]`` of each checkpoint, from the footer (``None``: not our
    part), and their spans (``None``: a row group each)."""
    try:
        meta = parquet().metadata.metadata or {}
    except pa.ArrowInvalid:  # not Parquet at all
        return None, None
    try:
        if ROWS_META in meta:
            rows, spans = json.loads(meta[ROWS_META]), json.loads(meta[SPANS_META])
            if len(spans) != len(rows):
                return None, None
            return rows, spans
        return json.loads(meta[LEGACY_ROWS_META]), None
    except (KeyError, ValueError):  # Parquet, but not a part this store wrote
        return None, None


def sweep(folder: AnyPath) -> dict[str, str] | None:
    """Remove what a killed writer left (we hold the run lock) and an old-layout file; on a
    local disk, the :func:`list_parts` listing of what is left, from the same scan."""
    legacy = folder.parent / f"{folder.name}{SUFFIX}"  # a run's table before parts
    if legacy.is_file():
        legacy.unlink(missing_ok=True)
    return _scan_local(folder, remove_temps=True) if is_local(folder) else None


def _scan_local(folder: AnyPath, remove_temps: bool) -> dict[str, str]:
    """``{part file: stamp}`` of a local folder, in one scan; what a killed writer left
    removed on the way if ``remove_temps``."""
    found: dict[str, str] = {}
    try:
        entries = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return found
    with entries:
        for entry in entries:
            name = entry.name
            if remove_temps and name.startswith(".p") and ".parquet.tmp-" in name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
            elif name.endswith(SUFFIX) and not name.startswith("."):
                # A part removed meanwhile (a save pruned or merged it) raises here, so
                # the reader lists again: a listing that skips it could miss its rows.
                st = entry.stat()
                found[name] = str(Stamp.of_stat(st))
    return found


# The index's key for its parts' entries; "files" before row groups held several checkpoints
# (an index of that time is not read, so code of that time never reads this one).
PARTS_KEY = "parts"


def encode_index(marks: dict[str, Any], files: dict[str, Any]) -> bytes:
    """The index as JSON (msgspec: its size grows with the run, it is written at each build)."""
    index = {"marks": marks, PARTS_KEY: files}
    try:
        return msgspec.json.encode(index, order="sorted")
    except (msgspec.EncodeError, UnicodeEncodeError, TypeError, ValueError):  # e.g. a NaN
        return json.dumps(index, sort_keys=True).encode("utf-8")


def decode_index(data: bytes) -> dict[str, Any]:
    try:
        index = msgspec.json.decode(data)
    except msgspec.DecodeError:
        index = json.loads(data)
    if not isinstance(index, dict):
        raise ValueError("not an index")
    return index


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
