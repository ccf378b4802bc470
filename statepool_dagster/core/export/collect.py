"""Gather every run of the store into one export: states paired with prompts, duplicates named."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pyarrow as pa

from ..names import PROMPTS, STATES
from ..runs.files import natural_key
from ..runs.names import run_name_problem
from ..store.atomic import READ_RETRY_DELAYS
from ..store.layout import StoreLayout
from ..store.reading import read_table
from ..store.schemas import SCHEMAS
from .rows import NOT_RECORDED, SPLITS, ExportOptions, ExportRow, ExportSet, split_of, state_key


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
