"""A run's table as a folder of Parquet parts whose row groups are checkpoints.

``<asset>/<run>/p00000003.parquet`` is what one build wrote: one row group per
checkpoint (or episode batch) it built. A build from scratch writes one part; a run
grown by one checkpoint adds a small part and rewrites nothing it did not change. The
newest checkpoint of a build always gets a part of its own, because it is the one the
next growth changes (its reference ops gain a next library): replacing it then costs
one small file, never the run. ``pyarrow.dataset``, pandas and ``datasets`` read the
folder as one table (they skip dot files).

Each part's footer names the checkpoint, input key and small facts (``info``) of every
row group, so the parts are the truth. ``.index.json`` caches them with each part's size
and mtime, plus the table's marks (source fingerprint, how far episodes.jsonl was read).
Where the cache does not match a part (a kill -9 between the two, a hand edit) its footer
is read instead, and a checkpoint found in two parts is taken from the newer one, the
older copy dropped at the next save.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, info_stamp, is_local
from ..names import TABLE_INDEX
from .atomic import temp_sibling, write_bytes_atomic
from .layout import StoreLayout

SUFFIX = ".parquet"
ROWS_META = b"statepool.rows"  # JSON: [[checkpoint, key, info], ...], one per row group
_PART = re.compile(r"p(\d{8,})\.parquet")


def writer_options(schema: pa.Schema) -> dict[str, Any]:
    """How parts are written: zstd; no dictionary; statistics only for non-text columns.

    A row group is one checkpoint, so per-row-group costs dominate: dictionaries and
    min/max statistics of large text cells (a state, a prompt) cost a third of the write
    and make the file larger; numeric statistics stay, for readers that filter on them.
    """
    numeric = [
        f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    ]
    return dict(compression="zstd", use_dictionary=False, write_statistics=numeric or False)


def part_name(version: int) -> str:
    """The checkpoint (or batch) name of ``version`` (int64); names sort in version order."""
    return f"v{version:019d}" if version >= 0 else f"n{version + 2**63:019d}"


@dataclass
class Part:
    """Where a checkpoint's rows are stored, what they were built from, small facts."""

    key: str
    info: dict[str, Any] = field(default_factory=dict)
    file: str | None = None  # None: not yet written out
    group: int = -1


class RecentParts:
    """The checkpoints this process wrote last, up to a byte budget (a constant, not a run).

    The next stage of the same run reads them back from here instead of from disk: a
    states build right after its snapshots, prompts right after states. Entries are keyed
    by the checkpoint's input key, so a changed checkpoint never matches an old entry.
    """

    def __init__(self, budget: int = 64 << 20):
        self.budget = budget
        self._tables: OrderedDict[tuple[str, str, str], pa.Table] = OrderedDict()
        self._size = 0

    def put(self, where: tuple[str, str, str], table: pa.Table) -> None:
        old = self._tables.pop(where, None)
        if old is not None:
            self._size -= old.nbytes
        if table.nbytes > self.budget:
            return
        self._tables[where] = table
        self._size += table.nbytes
        while self._tables and self._size > self.budget:
            _, dropped = self._tables.popitem(last=False)
            self._size -= dropped.nbytes

    def get(self, where: tuple[str, str, str]) -> pa.Table | None:
        return self._tables.get(where)


RECENT = RecentParts()


class RunTable:
    """One run's table of one asset: load it, write or drop checkpoints, then ``save()``."""

    def __init__(self, folder: AnyPath, schema: pa.Schema):
        self.folder = folder
        self.schema = schema
        self.parts: dict[str, Part] = {}
        self.marks: dict[str, Any] = {}
        self._files: dict[str, list[list[Any]]] = {}  # part file -> its row groups' entries
        self._stale: dict[str, set[int]] = {}  # part file -> row groups to drop
        self._open: dict[str, pq.ParquetFile] = {}
        self._writer: pq.ParquetWriter | None = None
        self._writing: tuple[str, AnyPath, Any] | None = None  # (name, final path, target)
        self._held: tuple[str, pa.Table] | None = None
        self._dirty = False
        self._load()

    # ------------------------------------------------------------------ reading

    def _listing(self) -> dict[str, str]:
        """``{part file: stamp}`` of the Parquet files in the folder."""
        found: dict[str, str] = {}
        if is_local(self.folder):
            try:
                with os.scandir(self.folder) as entries:
                    for entry in entries:
                        if entry.name.endswith(SUFFIX) and not entry.name.startswith("."):
                            st = entry.stat()
                            found[entry.name] = f"{st.st_size}:{st.st_mtime_ns}"
            except (FileNotFoundError, NotADirectoryError):
                pass
            return found
        try:
            infos = self.folder.fs.ls(self.folder.path, detail=True, refresh=True)
        except (FileNotFoundError, NotADirectoryError):
            return found
        except TypeError:  # a backend without listings-cache refresh
            infos = self.folder.fs.ls(self.folder.path, detail=True)
        for info in infos:
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name.endswith(SUFFIX) and not name.startswith("."):
                size, mtime, tag = info_stamp(info)
                found[name] = f"{size}:{mtime}:{tag}"
        return found

    def _load(self) -> None:
        try:
            cached = json.loads((self.folder / TABLE_INDEX).read_bytes())
        except (OSError, ValueError):
            cached = {}
        self.marks = dict(cached.get("marks") or {})
        known = cached.get("files") or {}
        listing = self._listing()
        for name in sorted(listing, key=_order):
            entry = known.get(name)
            if isinstance(entry, dict) and entry.get("stamp") == listing[name]:
                rows = entry["rows"]
            else:
                rows = self._footer(name)
                self._dirty = True
            self._files[name] = rows or []
            if rows is None:  # not a part of ours: dropped at the next save
                self._stale[name] = {-1}
                continue
            for group, (checkpoint, key, info) in enumerate(rows):
                old = self.parts.get(checkpoint)
                if old is not None:  # in two parts (an interrupted save): the newer wins
                    self._stale.setdefault(old.file, set()).add(old.group)
                self.parts[checkpoint] = Part(key, info, name, group)
        if set(known) - set(listing):
            self._dirty = True

    def _footer(self, name: str) -> list[list[Any]] | None:
        try:
            meta = self._file(name).metadata.metadata or {}
        except pa.ArrowInvalid:  # not Parquet at all
            return None
        try:
            return json.loads(meta[ROWS_META])
        except (KeyError, ValueError):  # Parquet, but not a part this store wrote
            return None

    def _file(self, name: str) -> pq.ParquetFile:
        if name not in self._open:
            path = self.folder / name
            self._open[name] = pq.ParquetFile(path if is_local(path) else path.open("rb"))
        return self._open[name]

    def _close_files(self) -> None:
        for parquet in self._open.values():
            with contextlib.suppress(Exception):
                parquet.close()
        self._open.clear()

    def names(self) -> list[str]:
        return sorted(self.parts)

    def read_part(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """One checkpoint's rows."""
        if self._held is not None and self._held[0] == name:
            table = self._held[1]
            return table.select(columns) if columns else table
        part = self.parts[name]
        recent = RECENT.get((str(self.folder), name, part.key))
        if recent is not None:
            return recent.select(columns) if columns else recent
        if part.file is None or (self._writing and part.file == self._writing[0]):
            self._finish_writer()
            part = self.parts[name]
        return self._file(part.file).read_row_group(part.group, columns=columns)

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """Every checkpoint as one table, in checkpoint order (empty, with the schema, if none).

        Each part file is read in one call (its current row groups); a table built over
        several builds is then put back in checkpoint order.
        """
        if self._held is not None or self._writer is not None:  # mid-build: one by one
            return self._concat([self.read_part(n, columns) for n in self.names()], columns)
        groups: dict[str, list[tuple[str, int]]] = {}
        for name in self.names():
            part = self.parts[name]
            groups.setdefault(part.file, []).append((name, part.group))
        tables, order = [], []
        for file in sorted(groups, key=_order):
            wanted = groups[file]
            tables.append(self._file(file).read_row_groups([g for _, g in wanted], columns))
            order.extend(name for name, _ in wanted)
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
        return pa.concat_tables([t.replace_schema_metadata(None).cast(wanted) for t in tables])

    # ------------------------------------------------------------------ writing

    def write(self, name: str, table: pa.Table, key: str, info: dict[str, Any]) -> None:
        """Store one checkpoint's rows (replacing its old ones at ``save``)."""
        self._forget(name)
        if self._held is not None:
            self._append(*self._held)
        self._held = (name, table)
        self.parts[name] = Part(key, info)
        RECENT.put((str(self.folder), name, key), table)
        self._dirty = True

    def drop(self, name: str) -> None:
        self._forget(name)
        self.parts.pop(name, None)
        self._dirty = True

    def _forget(self, name: str) -> None:
        """The stored rows of ``name`` are no longer current."""
        if self._held is not None and self._held[0] == name:
            self._held = None
        part = self.parts.get(name)
        if part is not None and part.file is not None:
            self._stale.setdefault(part.file, set()).add(part.group)

    def _append(self, name: str, table: pa.Table) -> None:
        if self._writer is None:
            self._start_writer()
        file = self._writing[0]
        part = self.parts[name]
        self._writer.write_table(
            table.replace_schema_metadata(None).cast(self.schema), row_group_size=max(1, len(table))
        )
        self._files[file].append([name, part.key, part.info])
        part.file, part.group = file, len(self._files[file]) - 1

    def _start_writer(self) -> None:
        seq = max((_order(n)[0] for n in self._files), default=0) + 1
        file = f"p{seq:08d}{SUFFIX}"
        final = self.folder / file
        if is_local(final):
            final.parent.mkdir(parents=True, exist_ok=True)
            target = temp_sibling(final)
            sink: Any = str(target)
        else:
            with contextlib.suppress(FileExistsError):
                final.parent.mkdir(parents=True, exist_ok=True)
            target = final.open("wb")  # an object store publishes it whole at close
            sink = target
        self._writer = pq.ParquetWriter(sink, self.schema, **writer_options(self.schema))
        self._writing = (file, final, target)
        self._files[file] = []

    def _finish_writer(self) -> None:
        if self._writer is None:
            return
        file, final, target = self._writing
        self._writer.add_key_value_metadata({ROWS_META.decode(): json.dumps(self._files[file])})
        self._writer.close()
        if is_local(final):
            os.replace(target, final)
        else:
            target.close()
        self._writer, self._writing = None, None

    def mark(self, **marks: Any) -> None:
        if any(self.marks.get(k) != v for k, v in marks.items()):
            self.marks.update(marks)
            self._dirty = True

    def save(self) -> None:
        """Write out the held checkpoint (a part of its own), prune old parts, then the index."""
        if self._held is not None:
            self._finish_writer()
            self._append(*self._held)
            self._held = None
        self._finish_writer()
        for file, groups in sorted(self._stale.items()):
            self._prune(file, groups)
        self._stale.clear()
        self._compact()
        self._close_files()
        self._sweep()
        if not self._dirty and (self.folder / TABLE_INDEX).exists():
            return
        listing = self._listing()
        files = {
            name: {"stamp": listing[name], "rows": rows}
            for name, rows in self._files.items()
            if name in listing
        }
        body = json.dumps({"marks": self.marks, "files": files}, sort_keys=True)
        if self.parts or files or self.marks:
            write_bytes_atomic(self.folder / TABLE_INDEX, body.encode("utf-8"))
        self._dirty = False

    def _sweep(self) -> None:
        """Remove what a killed writer left (we hold the run lock) and an old-layout file."""
        legacy = self.folder.parent / f"{self.folder.name}{SUFFIX}"  # a run's table before parts
        if legacy.is_file():
            legacy.unlink(missing_ok=True)
        if not is_local(self.folder) or not self.folder.is_dir():
            return
        for entry in os.scandir(self.folder):
            if entry.name.startswith(".p") and ".parquet.tmp-" in entry.name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def _prune(self, file: str, groups: set[int]) -> None:
        """Drop ``groups`` of ``file``: its current row groups move to a new part, then it goes.

        Never rewritten in place, so a reader holding its group numbers never gets other
        rows; the copy goes one row group at a time; a kill between the two leaves both,
        and the newer wins when the table is next loaded.
        """
        self._move({file: groups})

    def _compact(self) -> None:
        """Merge parts of a size, :data:`MERGE` at a time, into one (tiered, as an LSM tree).

        A run grown one checkpoint at a time adds a part per growth; merged this way it
        keeps at most ``MERGE - 1`` parts per size tier (tiers grow by ``MERGE``×), and each
        row is copied once per tier: O(log n) copies, never the run at each growth. The
        part holding the newest checkpoint is left alone: the next growth replaces it.
        """
        newest = max(self.parts, default=None)
        while True:
            tiers: dict[int, list[str]] = {}
            for file, rows in self._files.items():
                if rows and all(row[0] != newest for row in rows):
                    tiers.setdefault(_tier(len(rows)), []).append(file)
            full = [files for files in tiers.values() if len(files) >= MERGE]
            if not full:
                return
            self._move({file: set() for file in sorted(full[0], key=_order)[:MERGE]})

    def _move(self, sources: dict[str, set[int]]) -> None:
        """The current row groups of ``sources`` (less each one's dropped groups) go to one new
        part, in order; then the sources are removed."""
        moved = False
        for file, groups in sorted(sources.items(), key=lambda item: _order(item[0])):
            rows = self._files.get(file, [])
            if -1 in groups:
                continue
            source = None
            for g, row in enumerate(rows):
                part = self.parts.get(row[0])
                if g in groups or part is None or (part.file, part.group) != (file, g):
                    continue  # dropped, or stored again elsewhere
                if not moved:
                    self._start_writer()
                    moved = True
                source = source or self._file(file)
                self._writer.write_table(
                    source.read_row_group(g).replace_schema_metadata(None).cast(self.schema),
                    row_group_size=max(1, source.metadata.row_group(g).num_rows),
                )
                new = self._writing[0]
                self._files[new].append(row)
                part.file, part.group = new, len(self._files[new]) - 1
        if moved:
            self._finish_writer()
        self._close_files()
        self._dirty = True
        for file in sources:
            (self.folder / file).unlink(missing_ok=True)
            self._files.pop(file, None)


MERGE = 8  # parts of a size tier merged into one at a time


def _tier(rows: int) -> int:
    """The size tier of a part of ``rows`` row groups: 0 below MERGE, then one per ×MERGE."""
    tier = 0
    while rows >= MERGE:
        rows //= MERGE
        tier += 1
    return tier


def _order(file: str) -> tuple[int, str]:
    match = _PART.fullmatch(file)
    return (int(match.group(1)), file) if match else (0, file)


def read_table(folder: AnyPath, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """A run table's current rows as one table, in checkpoint order."""
    table = RunTable(folder, schema)
    try:
        return table.read(columns)
    finally:
        table._close_files()


def read_run_table(
    layout: StoreLayout, asset: str, run: str, columns: list[str] | None = None
) -> pa.Table:
    """One run's table of ``asset`` from the store, as one Arrow table (empty if never built)."""
    from .tables import SCHEMAS

    return read_table(layout.table(asset, run), SCHEMAS[asset], columns)
