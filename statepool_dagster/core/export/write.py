"""Write an export as its rows stream in: verl or TRL Parquet splits or a flat state pool,
over an earlier export."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import StatepoolError
from ..feedback.select import Selection, SelectionOptions
from ..locations import AnyPath, absolute, as_path
from ..store.cells import utf8
from ..store.columns import records_table
from .collect import export_rows
from .folder import StagedFolder
from .formats import (
    RECORDS,
    SESSIONS_INDEX,
)
from .gate import LengthFilter
from .rows import (
    FORMATS,
    MANIFEST,
    ExportOptions,
    ExportRow,
    ExportSet,
    Format,
    SourceOptions,
)

# Rows are buffered per split up to this many bytes of text, then written as one row group.
# A split smaller than that is one row group, byte for byte what writing it whole gave.
ROW_GROUP_BYTES = 4 << 20
ROW_GROUP_ROWS = 1 << 20  # pyarrow's default row group length


class _SplitFile:
    """One split's Parquet file, written a row group at a time."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path, self.schema = path, schema
        self.records: list[dict[str, Any]] = []
        self.size = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, record: dict[str, Any], size: int) -> None:
        self.records.append(record)
        self.size += size
        if self.size >= ROW_GROUP_BYTES or len(self.records) >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.records:
            return
        table = records_table(self.records, self.schema)
        self.records, self.size = [], 0
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self.writer.write_table(table)

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()


class FormatWriter:
    """Writes one format's files into a folder as rows arrive; ``finish`` adds the manifest.

    A split's Parquet file is opened on its first row: a split without rows has no file
    (an empty Parquet file is one that datasets.load_dataset refuses).
    """

    def __init__(self, fmt: Format, folder: Path, export: ExportSet):
        self.fmt, self.folder, self.export = fmt, folder, export
        self.splits: dict[str, _SplitFile] = {}
        self.sessions_index: Any = None

    def add(self, row: ExportRow) -> None:
        # The export's flags are set before its first row: read them here, not in __init__.
        flags = (self.export.with_sessions, self.export.weighted)
        if self.fmt == "pool":
            (self.folder / f"{row.state_id}.json").write_bytes(utf8(row.state))
            if row.session is not None:
                self._index_session(row)
            return
        record, schema = RECORDS[self.fmt]
        split = self.splits.get(row.split)
        if split is None:
            split = self.splits[row.split] = _SplitFile(
                self.folder / f"{row.split}.parquet", schema(*flags)
            )
        split.add(record(row, *flags), len(row.state) + len(row.prompt) + len(row.reference_ops))

    def _index_session(self, row: ExportRow) -> None:
        if self.sessions_index is None:
            path = self.folder / SESSIONS_INDEX
            self.sessions_index = open(path, "w", encoding="utf-8")  # noqa: SIM115
        entry = {"state_id": row.state_id, "session": row.session, "policy_step": row.policy_step}
        if row.weight is not None:
            entry["weight"] = row.weight
        self.sessions_index.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def finish(self, export: ExportSet) -> None:
        for split in self.splits.values():
            split.close()
        if self.sessions_index is not None:
            self.sessions_index.close()
        manifest = {"format": self.fmt, **export.summary()}
        text = json.dumps(manifest, ensure_ascii=False, indent=1)
        (self.folder / MANIFEST).write_bytes(text.encode("utf-8"))


def _check_replaceable(out: AnyPath, fmt: Format, force: bool = False) -> None:
    """Only an empty folder or an earlier export of ``fmt`` is replaced (another format's
    only with ``force``): never a folder of the user's."""
    if not out.exists():
        return
    if not out.is_dir():
        raise StatepoolError(f"export target {out} exists and is not a folder")
    manifest = out / MANIFEST
    if any(out.iterdir()) and not manifest.is_file():
        raise StatepoolError(
            f"export target {out} is not empty and holds no earlier export ({MANIFEST}): "
            "choose a new or empty folder"
        )
    if force or not manifest.is_file():
        return
    try:
        earlier = json.loads(manifest.read_bytes()).get("format")
    except (ValueError, AttributeError):
        earlier = None
    if earlier != fmt:
        raise StatepoolError(
            f"export target {out} holds a {earlier or 'unknown'} export, not {fmt}: "
            "choose another folder, or --force to replace it"
        )


class ExportRefused(StatepoolError):
    """An export's ``check`` refused it: the folders keep their earlier export."""


def check_target(fmt: Format, out: str | os.PathLike[str], force: bool = False) -> AnyPath:
    """``out`` as a path, once it is known that an export of ``fmt`` may replace it."""
    if fmt not in FORMATS:
        raise StatepoolError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    target = absolute(as_path(out))
    _check_replaceable(target, fmt, force)
    return target


def _targets(outs: dict[Format, str | os.PathLike[str]], force: bool) -> dict[Format, AnyPath]:
    return {fmt: check_target(fmt, out, force) for fmt, out in outs.items()}


def _write(
    rows: Iterable[ExportRow],
    export: ExportSet,
    outs: dict[Format, str | os.PathLike[str]],
    force: bool,
    check: Callable[[ExportSet], None] | None,
) -> int:
    targets = _targets(outs, force)
    staged = {fmt: StagedFolder(target) for fmt, target in targets.items()}
    try:
        writers = [FormatWriter(fmt, folder.path, export) for fmt, folder in staged.items()]
        for row in rows:
            for writer in writers:
                writer.add(row)
        for writer in writers:
            writer.finish(export)
        if check is not None:
            check(export)
        return sum(folder.commit() for folder in staged.values())
    finally:
        for folder in staged.values():
            folder.discard()


def stream_export(
    store: str | os.PathLike[str],
    outs: dict[Format, str | os.PathLike[str]],
    options: ExportOptions | None = None,
    force: bool = False,
    lengths: LengthFilter | None = None,
    check: Callable[[ExportSet], None] | None = None,
    sources: SourceOptions | None = None,
    selection: SelectionOptions | None = None,
    only: frozenset[str] | None = None,
) -> ExportSet:
    """Read the store once and write each ``{format: folder}`` as the rows stream in.

    Each folder is swapped in whole once the export is complete and ``check`` (given the
    finished counts and problems) has not raised; otherwise every folder keeps its earlier
    export. A folder is a local one or an fsspec URL, like the store; an earlier export
    of another format there is replaced only with ``force``. ``sources`` (default: runs
    and sessions), ``selection`` (default: none) and ``only`` (default: all) choose the
    states.
    """
    export = ExportSet(options or ExportOptions())
    chosen = Selection.from_options(selection, store) if selection is not None else None
    notice = chosen.notice() if chosen is not None else None
    if notice:
        export.problems.append(notice)
    rows = export_rows(store, export, lengths, sources, chosen, only)
    _write(rows, export, outs, force, check)
    return export
