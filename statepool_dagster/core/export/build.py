"""Trainer-ready exports of the store: verl and TRL Parquet, and a flat state pool.

Rows are read from the store's files (``checkpoint_states`` and ``curator_prompts``
tables, one per run), never through Dagster. Splits are drawn per run from a hash
of its name, so a run is never on both sides and adding runs moves no other run.
Identical states (same library and batch) are kept once: the earliest run by name
(natural order, ``run2`` before ``run10``) keeps them, and each run that lost states
is named in the export's problems.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import StatepoolError
from ..locations import AnyPath, absolute, as_path
from ..names import PROMPTS, STATES
from ..runs.files import natural_key
from ..runs.names import run_name_problem
from ..store.files import (
    READ_RETRY_DELAYS,
    StoreLayout,
    parquet_bytes,
    replace_dir_atomic,
)
from ..store.parts import read_table
from ..store.tables import SCHEMAS

Format = Literal["verl", "trl", "pool"]
FORMATS: tuple[Format, ...] = ("verl", "trl", "pool")
SPLITS = ("train", "val", "test")
MANIFEST = ".statepool_export"  # hidden and not *.json: loaders glob *.json and skip dot files
ABILITY = "skill_curation"
NOT_RECORDED = {"next_version": None, "ops": [], "note": "not recorded: rematerialize the run"}


class ExportOptions(BaseModel):
    """How runs are split; the fractions are shares of runs, not of rows."""

    model_config = ConfigDict(frozen=True)

    val_fraction: float = Field(0.1, ge=0, le=1)
    test_fraction: float = Field(0.0, ge=0, le=1)
    seed: int = 0

    @model_validator(mode="after")
    def _fractions_fit(self) -> ExportOptions:
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val and test fractions add up to 1 or more: train would get no run")
        return self

    @property
    def splits(self) -> list[str]:
        """The splits this export writes (val and test only when their fraction is above 0)."""
        wanted = {"train": True, "val": self.val_fraction > 0, "test": self.test_fraction > 0}
        return [s for s in SPLITS if wanted[s]]


def split_of(run: str, options: ExportOptions) -> str:
    """The run's split: a uniform draw from ``hash(seed, run)``, test first, then val."""
    digest = hashlib.blake2b(f"{options.seed}:{run}".encode(), digest_size=8).digest()
    draw = int.from_bytes(digest, "big") / 2**64
    if draw < options.test_fraction:
        return "test"
    if draw < options.test_fraction + options.val_fraction:
        return "val"
    return "train"


def state_key(state: dict[str, Any]) -> str:
    """Identity of a state for de-duplication: its library and its batch."""
    canonical = json.dumps(
        [state.get("lib_snapshot"), state.get("episodes")],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class ExportRow:
    """One state, ready for a trainer: its prompt, its state JSON and its reference ops."""

    index: int  # position within its split
    split: str
    state_id: str
    run: str
    version: int
    dataset: str
    prompt: str
    state: str
    reference_ops: str
    prompt_tokens: int | None = None  # set by export.lengths when a tokenizer counted it

    @property
    def ops(self) -> dict[str, Any]:
        return json.loads(self.reference_ops)

    def ground_truth(self) -> str:
        """The reference ops as the curator would answer them: a JSON list of operations."""
        return json.dumps(self.ops["ops"], ensure_ascii=False)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt}]


@dataclass
class ExportSet:
    """The rows of an export and what was left out."""

    options: ExportOptions
    rows: list[ExportRow] = field(default_factory=list)
    runs: dict[str, list[str]] = field(default_factory=dict)  # split -> runs
    duplicates: dict[str, str] = field(default_factory=dict)  # dropped -> kept state_id
    problems: list[str] = field(default_factory=list)
    prompt_lengths: dict[str, Any] | None = None

    def split_rows(self, split: str) -> list[ExportRow]:
        return [r for r in self.rows if r.split == split]

    def counts(self) -> dict[str, int]:
        return {s: len(self.split_rows(s)) for s in self.options.splits}

    def summary(self) -> dict[str, Any]:
        """What a manifest, the CLI and the asset's metadata report."""
        summary = {
            "rows": self.counts(),
            "runs": {s: self.runs.get(s, []) for s in self.options.splits},
            "duplicates_dropped": len(self.duplicates),
            "problems": self.problems,
            "options": self.options.model_dump(),
        }
        if self.prompt_lengths is not None:
            summary["prompt_lengths"] = self.prompt_lengths
        return summary


def _read(layout: StoreLayout, asset: str, run: str) -> list[dict[str, Any]]:
    return read_table(layout.table(asset, run), SCHEMAS[asset]).to_pylist()


def _run_tables(layout: StoreLayout, run: str) -> tuple[list[dict], list[dict]] | None:
    """A run's states and the prompts rendered from exactly them; ``None`` if they never agree.

    Each prompt records the key of the state it was rendered from. A run being rebuilt
    has new states before it has their prompts: read both again (for up to about five
    seconds) until every prompt's state is the stored one.
    """
    for delay in (*READ_RETRY_DELAYS, None):
        prompts = _read(layout, PROMPTS, run)
        states = _read(layout, STATES, run)
        keys = {row["state_id"]: row["input_key"] for row in states}
        if all(keys.get(row["state_id"]) == row["state_key"] for row in prompts):
            return states, prompts
        if delay is not None:
            time.sleep(delay)
    return None


def _store_runs(layout: StoreLayout) -> list[str]:
    both = set(layout.runs_with(PROMPTS)) & set(layout.runs_with(STATES))
    return sorted((r for r in both if run_name_problem(r) is None), key=natural_key)


def collect_export(
    store: str | os.PathLike[str], options: ExportOptions | None = None
) -> ExportSet:
    """Every state of every run in the store, split by run and de-duplicated."""
    options = options or ExportOptions()
    layout = StoreLayout(store)
    result = ExportSet(options)
    seen: dict[str, str] = {}
    index = dict.fromkeys(SPLITS, 0)
    for run in _store_runs(layout):
        split = split_of(run, options)
        tables = _run_tables(layout, run)
        if tables is None:
            result.problems.append(
                f"{run}: its prompts were not rendered from its current states (a rebuild in "
                "progress, or one that failed before its prompts): run left out; "
                "materialize it again"
            )
            continue
        states = {r["state_id"]: r for r in tables[0]}
        kept = 0
        for prompt_row in tables[1]:
            sid = prompt_row["state_id"]
            state_row = states.get(sid)
            if state_row is None:
                result.problems.append(f"{run}: prompt {sid} has no state (partial write?)")
                continue
            state = json.loads(state_row["state"])
            key = state_key(state)
            if key in seen:
                result.duplicates[sid] = seen[key]
                continue
            seen[key] = sid
            ops = state_row.get("reference_ops") or prompt_row.get("reference_ops")
            result.rows.append(
                ExportRow(
                    index=index[split],
                    split=split,
                    state_id=sid,
                    run=run,
                    version=int(state_row["version"]),
                    dataset=str(state.get("dataset", "")),
                    prompt=prompt_row["prompt"],
                    state=state_row["state"],
                    reference_ops=ops or json.dumps(NOT_RECORDED),
                )
            )
            index[split] += 1
            kept += 1
        if kept:
            result.runs.setdefault(split, []).append(run)
    result.problems.extend(_duplicate_problems(result.duplicates))
    for split in options.splits:
        if result.rows and split not in result.runs:
            result.problems.append(f"no run fell in split {split!r}: it has no file")
    return result


def _run_of(state_id: str) -> str:
    return state_id.rsplit("_ckpt", 1)[0]


def _duplicate_problems(duplicates: dict[str, str], shown: int = 5) -> list[str]:
    """One line per run that lost states to an earlier run's identical ones."""
    by_pair: dict[tuple[str, str], list[str]] = {}
    for dropped, kept in duplicates.items():
        by_pair.setdefault((_run_of(dropped), _run_of(kept)), []).append(dropped)
    lines = []
    for (dropped_run, kept_run), ids in by_pair.items():
        listed = ", ".join(ids[:shown]) + (f", … ({len(ids)} in all)" if len(ids) > shown else "")
        lines.append(
            f"{dropped_run}: {len(ids)} states identical to {kept_run}'s left out "
            f"(the earliest run by name keeps them): {listed}"
        )
    return lines


def empty_train_problem(export: ExportSet) -> str | None:
    """Why ``train`` would be empty although the store has states, or ``None``."""
    if not export.rows or export.runs.get("train"):
        return None
    elsewhere = ", ".join(f"{s} {len(r)}" for s, r in export.runs.items())
    return f"no run fell in train (runs: {elsewhere}): lower the val/test fractions"


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
