"""Write an export: verl or TRL Parquet splits or a flat state pool, over an earlier export."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pyarrow as pa

from ..errors import StatepoolError
from ..locations import AnyPath, absolute, as_path
from ..store.atomic import parquet_bytes, replace_dir_atomic
from .collect import _MESSAGE, collect_export
from .rows import ABILITY, FORMATS, MANIFEST, ExportOptions, ExportRow, ExportSet, Format

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


def verl_table(rows: list[ExportRow]) -> pa.Table:
    """verl's RL dataset layout; varying shapes (state, ops) travel as JSON strings."""
    records = [
        {
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
        for r in rows
    ]
    return pa.Table.from_pylist(records, schema=VERL_SCHEMA)


def trl_table(rows: list[ExportRow]) -> pa.Table:
    """A conversational ``prompt`` for GRPOTrainer, plus the columns a reward function reads."""
    records = []
    for r in rows:
        state = json.loads(r.state)
        records.append(
            {
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
        )
    return pa.Table.from_pylist(records, schema=TRL_SCHEMA)


def export_files(export: ExportSet, fmt: Format) -> Iterator[tuple[str, bytes]]:
    """``(file name, bytes)`` of one format's folder, its manifest included."""
    if fmt == "pool":
        for row in export.rows:
            yield f"{row.state_id}.json", row.state.encode("utf-8")
    else:
        build = verl_table if fmt == "verl" else trl_table
        for split in export.options.splits:
            rows = export.split_rows(split)
            if rows:  # an empty Parquet file is one that datasets.load_dataset refuses
                yield f"{split}.parquet", parquet_bytes(build(rows))
    manifest = {"format": fmt, **export.summary()}
    yield MANIFEST, json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8")


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


def write_export(
    export: ExportSet, fmt: Format, out: str | os.PathLike[str], force: bool = False
) -> int:
    """Make ``out`` hold exactly this export in ``fmt``, swapped in whole; returns files written.

    ``out`` is a local folder or an fsspec URL, like the store. An earlier export of
    another format there is replaced only with ``force``.
    """
    if fmt not in FORMATS:
        raise StatepoolError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    target = absolute(as_path(out))
    _check_replaceable(target, fmt, force)
    return replace_dir_atomic(target, export_files(export, fmt))


def export_store(
    store: str | os.PathLike[str],
    fmt: Format,
    out: str | os.PathLike[str],
    options: ExportOptions | None = None,
) -> ExportSet:
    """Read the store and write one export format to ``out``."""
    export = collect_export(store, options)
    write_export(export, fmt, out)
    return export
