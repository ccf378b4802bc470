"""A run's table as a folder of parts: one Parquet file per checkpoint (or episode batch).

``<asset>/<run>/v0000000003.parquet`` holds checkpoint 3's rows. A new checkpoint adds
one part; a changed one replaces its own part (an atomic rename, or one put on an
object store); nothing else is rewritten. ``pyarrow.dataset``, pandas and ``datasets``
read the folder as one table (they skip dot files).

Each part carries its input key and a few small facts (``info``) in its Parquet footer,
so the part itself is the truth. ``.index.json`` caches them with each part's size and
mtime, plus the table's marks (source fingerprint, how far episodes.jsonl was read):
a stage learns what it can reuse from one small JSON file, and falls back to a part's
footer where the cache does not match the file (e.g. after a kill -9 between the two).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, info_stamp, is_local
from ..names import TABLE_INDEX
from .files import StoreLayout, read_parquet, write_bytes_atomic, write_parquet_atomic

PART_SUFFIX = ".parquet"
KEY_META, INFO_META = b"statepool.key", b"statepool.info"


def part_name(version: int) -> str:
    """The part of checkpoint (or batch) ``version``; names sort in version order."""
    return f"v{version:010d}" if version >= 0 else f"n{-version:010d}"


@dataclass
class Part:
    """What a stored part was built from (``key``) and the facts a later stage needs."""

    key: str
    info: dict[str, Any] = field(default_factory=dict)
    stamp: str = ""


def _stamp_local(entry) -> str:
    st = entry.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


class RunTable:
    """One run's table of one asset; load it, write or drop parts, then ``save()``."""

    def __init__(self, folder: AnyPath, schema: pa.Schema):
        self.folder = folder
        self.schema = schema
        self.parts: dict[str, Part] = {}
        self.marks: dict[str, Any] = {}
        self._dirty = False
        self._load()

    # ------------------------------------------------------------------ reading

    def _listing(self) -> dict[str, str]:
        """``{part name: stamp}`` of the part files in the folder."""
        found: dict[str, str] = {}
        if is_local(self.folder):
            try:
                import os

                with os.scandir(self.folder) as entries:
                    for entry in entries:
                        if entry.name.endswith(PART_SUFFIX) and not entry.name.startswith("."):
                            found[entry.name[: -len(PART_SUFFIX)]] = _stamp_local(entry)
            except (FileNotFoundError, NotADirectoryError):
                pass
            return found
        try:
            infos = self.folder.fs.ls(self.folder.path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return found
        for info in infos:
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            if name.endswith(PART_SUFFIX) and not name.startswith("."):
                size, mtime, tag = info_stamp(info)
                found[name[: -len(PART_SUFFIX)]] = f"{size}:{mtime}:{tag}"
        return found

    def _load(self) -> None:
        cached: dict[str, Any] = {}
        try:
            cached = json.loads((self.folder / TABLE_INDEX).read_bytes())
        except (OSError, ValueError):
            cached = {}
        self.marks = dict(cached.get("marks") or {})
        known = cached.get("parts") or {}
        for name, stamp in self._listing().items():
            entry = known.get(name)
            if isinstance(entry, dict) and entry.get("stamp") == stamp:
                self.parts[name] = Part(entry["key"], entry.get("info") or {}, stamp)
                continue
            part = self._footer(name, stamp)
            if part is not None:
                self.parts[name] = part
            self._dirty = True
        if set(known) - set(self.parts):
            self._dirty = True

    def _footer(self, name: str, stamp: str) -> Part | None:
        """A part's key and info from its own footer; ``None`` for a file that is no part."""
        path = self.folder / f"{name}{PART_SUFFIX}"
        try:
            if is_local(path):
                meta = pq.read_schema(path).metadata or {}
            else:
                with path.open("rb") as f:
                    meta = pq.read_schema(f).metadata or {}
            return Part(meta[KEY_META].decode(), json.loads(meta.get(INFO_META, b"{}")), stamp)
        except (OSError, KeyError, ValueError, pa.ArrowException):
            return None

    def names(self) -> list[str]:
        return sorted(self.parts)

    def read_part(self, name: str, columns: list[str] | None = None) -> pa.Table:
        return read_parquet(self.folder / f"{name}{PART_SUFFIX}", columns=columns)

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """Every part as one table, in version order (empty, with the schema, if none)."""
        return read_table(self.folder, self.schema, columns, self.names())

    def head(self, columns: list[str], rows: int = 10) -> pa.Table:
        """The first ``rows`` rows, reading only the parts that hold them."""
        names: list[str] = []
        count = 0
        for name in self.names():
            if count >= rows:
                break
            names.append(name)
            count += int(self.parts[name].info.get("rows", 1))
        return read_table(self.folder, self.schema, columns, names).slice(0, rows)

    # ------------------------------------------------------------------ writing

    def write(self, name: str, table: pa.Table, key: str, info: dict[str, Any]) -> None:
        """Replace (or add) one part, atomically, its key and info in its own footer."""
        meta = {
            **(table.schema.metadata or {}),
            KEY_META: key.encode(),
            INFO_META: json.dumps(info, sort_keys=True).encode(),
        }
        write_parquet_atomic(
            self.folder / f"{name}{PART_SUFFIX}", table.replace_schema_metadata(meta)
        )
        self.parts[name] = Part(key, info)
        self._dirty = True

    def drop(self, name: str) -> None:
        path = self.folder / f"{name}{PART_SUFFIX}"
        path.unlink(missing_ok=True)
        self.parts.pop(name, None)
        self._dirty = True

    def mark(self, **marks: Any) -> None:
        if any(self.marks.get(k) != v for k, v in marks.items()):
            self.marks.update(marks)
            self._dirty = True

    def save(self) -> None:
        """Write the index (the parts' stamps are taken now, after every write)."""
        if not self._dirty and (self.folder / TABLE_INDEX).exists():
            return
        listing = self._listing()
        parts = {
            name: {"key": p.key, "info": p.info, "stamp": listing.get(name, "")}
            for name, p in sorted(self.parts.items())
        }
        body = json.dumps({"marks": self.marks, "parts": parts}, sort_keys=True)
        write_bytes_atomic(self.folder / TABLE_INDEX, body.encode("utf-8"))
        self._dirty = False


def read_table(
    folder: AnyPath,
    schema: pa.Schema,
    columns: list[str] | None = None,
    names: list[str] | None = None,
) -> pa.Table:
    """A run table's parts as one table (``names``: which parts; default every part)."""
    if names is None:
        names = sorted(RunTable(folder, schema).parts)
    wanted = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    if not names:
        return wanted.empty_table()
    tables = [read_parquet(folder / f"{n}{PART_SUFFIX}", columns=columns) for n in names]
    return pa.concat_tables([t.replace_schema_metadata(None).cast(wanted) for t in tables])


def read_run_table(
    layout: StoreLayout, asset: str, run: str, columns: list[str] | None = None
) -> pa.Table:
    """One run's table of ``asset`` from the store, as one Arrow table (empty if never built)."""
    from .tables import SCHEMAS

    return read_table(layout.table(asset, run), SCHEMAS[asset], columns)
