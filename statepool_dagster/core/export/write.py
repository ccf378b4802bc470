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
from .collect import export_rows
from .folder import StagedFolder
from .lengths import LengthFilter
from .rows import (
    ABILITY,
    FORMATS,
    MANIFEST,
    ExportOptions,
    ExportRow,
    ExportSet,
    Format,
    SourceOptions,
)

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])

VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(_MESSAGE)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("state_id", pa.string()),
                    ("run", pa.string()),
                    ("version", pa.int64()),
                    ("has_reference_ops", pa.bool_()),
                    ("state", pa.string()),
                    ("reference_ops", pa.string()),
                    ("prompt_tokens", pa.int64()),
                ]
            ),
        ),
    ]
)


TRL_SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(_MESSAGE)),
        ("state_id", pa.string()),
        ("run", pa.string()),
        ("version", pa.int64()),
        ("ground_truth", pa.string()),
        ("reference_ops", pa.string()),
        ("followup_qids", pa.list_(pa.string())),
        ("gt_map", pa.string()),
        ("state", pa.string()),
        ("prompt_tokens", pa.int64()),
    ]
)


# Where session states are exported, each row also says where it came from; with a
# weight, each row has its weight. A run-only, unweighted export keeps the schemas above.
SOURCE_FIELDS = [("source", pa.string()), ("session", pa.string()), ("policy_step", pa.int64())]
WEIGHT_FIELD = ("weight", pa.float64())
SESSIONS_INDEX = ".statepool_sessions.jsonl"  # pool format: each session state's session


def verl_schema(sources: bool = False, weighted: bool = False) -> pa.Schema:
    """verl's schema, with the source fields in ``extra_info`` and a ``weight`` column."""
    if not (sources or weighted):
        return VERL_SCHEMA
    fields = list(VERL_SCHEMA)
    if sources:
        info = fields[-1]
        fields[-1] = pa.field(info.name, pa.struct([*info.type, *SOURCE_FIELDS]))
    if weighted:
        fields.append(pa.field(*WEIGHT_FIELD))
    return pa.schema(fields)


def trl_schema(sources: bool = False, weighted: bool = False) -> pa.Schema:
    """TRL's schema, with ``source``, ``session``, ``policy_step`` and ``weight`` columns."""
    if not (sources or weighted):
        return TRL_SCHEMA
    fields = list(TRL_SCHEMA)
    if sources:
        fields += [pa.field(*f) for f in SOURCE_FIELDS]
    if weighted:
        fields.append(pa.field(*WEIGHT_FIELD))
    return pa.schema(fields)


def _sources(r: ExportRow) -> dict[str, Any]:
    return {"source": r.source, "session": r.session, "policy_step": r.policy_step}


def verl_record(r: ExportRow, sources: bool = False, weighted: bool = False) -> dict[str, Any]:
    """One row in verl's RL dataset layout; varying shapes (state, ops) travel as JSON."""
    record = {
        "data_source": f"statepool/{r.dataset}",
        "prompt": r.messages(),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": r.ground_truth()},
        "extra_info": {
            "index": r.index,
            "split": r.split,
            "state_id": r.state_id,
            "run": r.run,
            "version": r.version,
            "has_reference_ops": r.ops.get("next_version") is not None,
            "state": r.state,
            "reference_ops": r.reference_ops,
            "prompt_tokens": r.prompt_tokens,
        },
    }
    if sources:
        record["extra_info"].update(_sources(r))
    if weighted:
        record["weight"] = r.weight
    return record


def trl_record(r: ExportRow, sources: bool = False, weighted: bool = False) -> dict[str, Any]:
    """A conversational ``prompt`` for GRPOTrainer, plus the columns a reward function reads."""
    state = json.loads(r.state)
    record = {
        "prompt": r.messages(),
        "state_id": r.state_id,
        "run": r.run,
        "version": r.version,
        "ground_truth": r.ground_truth(),
        "reference_ops": r.reference_ops,
        "followup_qids": [str(q) for q in state.get("followup_qids", [])],
        "gt_map": json.dumps(state.get("gt_map", {}), ensure_ascii=False),
        "state": r.state,
        "prompt_tokens": r.prompt_tokens,
    }
    if sources:
        record.update(_sources(r))
    if weighted:
        record["weight"] = r.weight
    return record


RECORDS = {"verl": (verl_record, verl_schema), "trl": (trl_record, trl_schema)}


def _flags(rows: list[ExportRow]) -> tuple[bool, bool]:
    return any(r.session for r in rows), any(r.weight is not None for r in rows)


def verl_table(rows: list[ExportRow]) -> pa.Table:
    """verl rows; with source fields when a row is a session's, a weight when one has it."""
    flags = _flags(rows)
    return pa.Table.from_pylist([verl_record(r, *flags) for r in rows], schema=verl_schema(*flags))


def trl_table(rows: list[ExportRow]) -> pa.Table:
    flags = _flags(rows)
    return pa.Table.from_pylist([trl_record(r, *flags) for r in rows], schema=trl_schema(*flags))


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
        table = pa.Table.from_pylist(self.records, schema=self.schema)
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
            (self.folder / f"{row.state_id}.json").write_bytes(row.state.encode("utf-8"))
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
) -> ExportSet:
    """Read the store once and write each ``{format: folder}`` as the rows stream in.

    Each folder is swapped in whole once the export is complete and ``check`` (given the
    finished counts and problems) has not raised; otherwise every folder keeps its earlier
    export. A folder is a local one or an fsspec URL, like the store; an earlier export
    of another format there is replaced only with ``force``. ``sources`` (default: runs
    and sessions) and ``selection`` (default: none) choose the states.
    """
    export = ExportSet(options or ExportOptions())
    chosen = Selection.from_options(selection, store) if selection is not None else None
    _write(export_rows(store, export, lengths, sources, chosen), export, outs, force, check)
    return export


def write_export(
    export: ExportSet, fmt: Format, out: str | os.PathLike[str], force: bool = False
) -> int:
    """Write an export held in memory (``collect_export``) to ``out`` in ``fmt``."""
    return _write(export.rows, export, {fmt: out}, force, None)


def export_store(
    store: str | os.PathLike[str],
    fmt: Format,
    out: str | os.PathLike[str],
    options: ExportOptions | None = None,
) -> ExportSet:
    """Read the store and write one export format to ``out``, streaming."""
    return stream_export(store, {fmt: out}, options)
