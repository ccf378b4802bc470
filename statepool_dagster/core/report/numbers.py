"""The report's figures, read from the store's tables (never from Dagster)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..export.collect import collect_export
from ..export.rows import FORMATS, MANIFEST, ExportOptions, ExportSet
from ..locations import AnyPath, as_path
from ..names import EPISODES, PROMPTS, SNAPSHOTS, SNAPSHOTS_DIR, STATES
from ..runs.files import natural_key
from ..runs.names import run_name_problem
from ..runs.snapshots import list_snapshots
from ..store.layout import StoreLayout
from ..store.pool import read_rejects
from ..store.reading import read_run_table

OP_KINDS = {"add_card": "add", "update_card": "update", "delete_card": "delete"}
REJECT_SOURCES = ("episodes", "snapshots", "sidecars")


@dataclass
class RunNumbers:
    """One run's curves and counts."""

    run: str
    accuracy: dict[int, float] = field(default_factory=dict)  # library version -> share correct
    episodes: dict[int, int] = field(default_factory=dict)  # library version -> episodes
    cards: dict[int, int] = field(default_factory=dict)  # snapshot version -> cards
    ops: dict[int, dict[str, int]] = field(default_factory=dict)  # checkpoint -> kind -> count
    states: int = 0
    rejects: list[str] = field(default_factory=list)  # "source: file line N: error"
    ignored: dict[str, str] = field(default_factory=dict)  # file -> why it was passed over
    split: str | None = None


@dataclass
class PoolNumbers:
    """The whole pool: every run, prompt lengths and the export's splits."""

    runs: list[RunNumbers]
    prompt_chars: list[int]
    split_rows: dict[str, int]
    split_runs: dict[str, int]
    problems: list[str]
    splits_from: str  # where the split figures come from, said under the plot
    length_limit: int | None = None  # the export's prompt limit, when one is set


def _table(layout: StoreLayout, asset: str, run: str, columns: list[str]) -> list[dict]:
    return read_run_table(layout, asset, run, columns).to_pylist()


def _rows(table: pa.Table, batch: int = 256) -> Iterator[dict[str, Any]]:
    """``table``'s rows as dicts, a batch at a time: a long run's texts never all at once."""
    for start in range(0, table.num_rows, batch):
        yield from table.slice(start, batch).to_pylist()


def _episode_counts(layout: StoreLayout, run: str) -> dict[int, tuple[int, int]]:
    """``{version: (episodes, correct)}``, counted in Arrow: a run may hold millions of
    episodes, which as Python rows would take gigabytes."""
    table = read_run_table(layout, EPISODES, run, ["version", "correct"])
    table = table.filter(pc.is_valid(table["version"]))
    correct = pc.fill_null(table["correct"], False).cast(pa.int64())  # a null is not correct
    counts = (
        pa.table({"version": table["version"], "correct": correct})
        .group_by("version")
        .aggregate([("correct", "count"), ("correct", "sum")])
    )
    return {
        version: (episodes, right)
        for version, episodes, right in zip(
            counts["version"].to_pylist(),
            counts["correct_count"].to_pylist(),
            counts["correct_sum"].to_pylist(),
            strict=True,
        )
    }


def _store_runs(layout: StoreLayout) -> list[str]:
    names = set()
    for asset in (EPISODES, SNAPSHOTS, STATES, PROMPTS):
        names.update(layout.runs_with(asset))
    return sorted((n for n in names if run_name_problem(n) is None), key=natural_key)


def _run_numbers(layout: StoreLayout, run: str, runs_root: AnyPath | None) -> RunNumbers:
    numbers = RunNumbers(run)
    for version, (episodes, correct) in sorted(_episode_counts(layout, run).items()):
        numbers.episodes[version] = episodes
        numbers.accuracy[version] = correct / episodes
    for row in _table(layout, SNAPSHOTS, run, ["version", "n_cards"]):
        numbers.cards[row["version"]] = row["n_cards"]
    states = read_run_table(layout, STATES, run, ["version", "reference_ops"])
    numbers.states = states.num_rows
    for row in _rows(states):
        kinds = dict.fromkeys(OP_KINDS.values(), 0)
        ops = json.loads(row["reference_ops"] or "{}").get("ops") or []
        for op in ops:
            kind = OP_KINDS.get(op.get("op") if isinstance(op, dict) else None)
            if kind:
                kinds[kind] += 1
        numbers.ops[row["version"]] = kinds
    for source in REJECT_SOURCES:
        numbers.rejects += [f"{source}: {r.describe()}" for r in read_rejects(layout, run, source)]
    if runs_root is not None:
        snapshots = runs_root / run / SNAPSHOTS_DIR
        numbers.ignored = {
            f"{SNAPSHOTS_DIR}/{name}": why
            for name, why in list_snapshots(snapshots).ignored.items()
        }
    return numbers


def _last_export(layout: StoreLayout) -> dict | None:
    """The summary the last export of the store wrote in its manifest, if any."""
    for fmt in FORMATS:
        manifest = layout.exports() / fmt / MANIFEST
        if manifest.is_file():
            try:
                return json.loads(manifest.read_bytes())
            except ValueError:
                return None
    return None


def pool_numbers(
    store: str | AnyPath,
    options: ExportOptions | None = None,
    runs_dir: str | AnyPath | None = None,
    export: ExportSet | None = None,
    length_limit: int | None = None,
    collect: bool = True,
) -> PoolNumbers:
    """Every figure of the report.

    The splits are ``export``'s when given; else the store is collected as an export would
    be (``collect``), or, to stay cheap after a sync, taken from the last export's manifest.
    """
    layout = StoreLayout(store)
    if export is not None:
        summary, splits_from = export.summary(), "this export"
    elif collect:
        summary, splits_from = collect_export(store, options).summary(), "the store as it is now"
    else:
        summary, splits_from = _last_export(layout), "the last export (training_dataset)"
        if summary is None:
            summary, splits_from = {"rows": {}, "runs": {}, "problems": []}, "no export yet"
    runs_root = as_path(runs_dir) if runs_dir is not None else None
    if runs_root is not None and not runs_root.is_dir():
        runs_root = None
    split_of_run = {run: split for split, runs in summary["runs"].items() for run in runs}
    runs = []
    prompt_chars: list[int] = []
    for run in _store_runs(layout):
        numbers = _run_numbers(layout, run, runs_root)
        numbers.split = split_of_run.get(run)
        runs.append(numbers)
        prompt_chars += [r["prompt_chars"] for r in _table(layout, PROMPTS, run, ["prompt_chars"])]
    return PoolNumbers(
        runs=runs,
        prompt_chars=prompt_chars,
        split_rows=dict(summary["rows"]),
        split_runs={s: len(r) for s, r in summary["runs"].items()},
        problems=list(summary["problems"]),
        splits_from=splits_from,
        length_limit=length_limit,
    )
