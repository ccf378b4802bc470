"""The report's figures, read from the store's tables (never from Dagster), a run at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..export.collect import tally_export
from ..export.rows import FORMATS, MANIFEST, ExportOptions, ExportSet
from ..locations import AnyPath, as_path
from ..names import (
    EPISODES,
    PROMPTS,
    RUN_REJECT_SOURCES,
    SNAPSHOTS,
    SNAPSHOTS_DIR,
    STATES,
    run_name_problem,
)
from ..runs.files import natural_key
from ..runs.snapshots import list_snapshots
from ..states.reference_ops import OP_KINDS, op_counts
from ..store.layout import StoreLayout, read_rejects
from ..store.part_files import part_version
from ..store.parts import RunTable
from ..store.reading import CheckpointBatches, read_run_infos, read_run_table
from ..store.schemas import SCHEMAS


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


SPARK_POINTS = 40  # a sparkline's points at most: a long run's curve is sampled


def _sampled(points: dict[int, float]) -> list[tuple[int, float]]:
    items = sorted(points.items())
    if len(items) <= SPARK_POINTS:
        return items
    step = (len(items) - 1) / (SPARK_POINTS - 1)
    return [items[round(i * step)] for i in range(SPARK_POINTS)]


@dataclass
class RunRow:
    """One run's line of the overview: counts and sampled curves, never its checkpoints."""

    run: str
    split: str | None
    states: int
    episodes: int
    accuracy: list[tuple[int, float]]  # sampled (version, share correct)
    cards: list[tuple[int, float]]  # sampled (version, cards)
    ops: dict[str, int]  # kind -> count over the run
    rejects: int
    ignored: int
    problems: list[str]  # the export's problems about this run

    @classmethod
    def of(cls, numbers: RunNumbers, problems: list[str]) -> RunRow:
        ops = dict.fromkeys(OP_KINDS.values(), 0)
        for kinds in numbers.ops.values():
            for kind, count in kinds.items():
                ops[kind] += count
        return cls(
            run=numbers.run,
            split=numbers.split,
            states=numbers.states,
            episodes=sum(numbers.episodes.values()),
            accuracy=_sampled(numbers.accuracy),
            cards=_sampled({k: float(v) for k, v in numbers.cards.items()}),
            ops=ops,
            rejects=len(numbers.rejects),
            ignored=len(numbers.ignored),
            problems=problems,
        )

    @property
    def flagged(self) -> bool:
        """Rejected lines, ignored files or export problems: listed first."""
        return bool(self.rejects or self.ignored or self.problems)


@dataclass
class PoolNumbers:
    """The whole pool: one row per run, prompt lengths and the export's splits."""

    runs: list[RunRow]
    prompt_chars: Sequence[int]
    split_rows: dict[str, int]
    split_runs: dict[str, int]
    problems: list[str]
    splits_from: str  # where the split figures come from, said under the plot
    length_limit: int | None = None  # the export's prompt limit, when one is set


def _table(layout: StoreLayout, asset: str, run: str, columns: list[str]) -> list[dict]:
    return read_run_table(layout, asset, run, columns).to_pylist()


def _state_rows(layout: StoreLayout, run: str, batch: int = 64) -> Iterator[dict[str, Any]]:
    """The run's states' versions and reference ops, a batch of checkpoints at a time."""
    table = CheckpointBatches(RunTable(layout.table(STATES, run), SCHEMAS[STATES]))
    try:
        for _, rows in table.batches(["version", "reference_ops"], batch):
            yield from rows.to_pylist()
    finally:
        table.close()


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


def store_runs(layout: StoreLayout) -> list[str]:
    names = set()
    for asset in (EPISODES, SNAPSHOTS, STATES, PROMPTS):
        names.update(layout.runs_with(asset))
    return sorted((n for n in names if run_name_problem(n) is None), key=natural_key)


def _counted_by_facts(layout: StoreLayout, run: str, numbers: RunNumbers) -> bool:
    """The run's curves and counts from the facts each stage keeps per checkpoint in its
    table's index (no part read); False, nothing counted, where a fact is missing (a store
    written before the stages kept them)."""
    episodes = read_run_infos(layout, EPISODES, run)
    snapshots = read_run_infos(layout, SNAPSHOTS, run)
    states = read_run_infos(layout, STATES, run)
    if not (
        all({"version", "rows", "correct"} <= info.keys() for _, info in episodes)
        and all({"version", "n_cards"} <= info.keys() for _, info in snapshots)
        and all("ops" in info for _, info in states)
    ):
        return False
    counts: dict[int, list[int]] = {}
    for _, info in episodes:
        if info["rows"]:
            both = counts.setdefault(info["version"], [0, 0])
            both[0] += info["rows"]
            both[1] += info["correct"]
    for version, (rows, correct) in sorted(counts.items()):
        numbers.episodes[version] = rows
        numbers.accuracy[version] = correct / rows
    for _, info in snapshots:
        numbers.cards[info["version"]] = info["n_cards"]
    for name, info in states:
        numbers.states += 1
        numbers.ops[part_version(name)] = dict(zip(OP_KINDS.values(), info["ops"], strict=True))
    return True


def _counted_by_rows(layout: StoreLayout, run: str, numbers: RunNumbers) -> None:
    """The run's curves and counts from its tables' rows."""
    for version, (episodes, correct) in sorted(_episode_counts(layout, run).items()):
        numbers.episodes[version] = episodes
        numbers.accuracy[version] = correct / episodes
    for row in _table(layout, SNAPSHOTS, run, ["version", "n_cards"]):
        numbers.cards[row["version"]] = row["n_cards"]
    for row in _state_rows(layout, run):
        numbers.states += 1
        counts = op_counts(json.loads(row["reference_ops"] or "{}"))
        numbers.ops[row["version"]] = dict(zip(OP_KINDS.values(), counts, strict=True))


def run_numbers(layout: StoreLayout, run: str, runs_root: AnyPath | None) -> RunNumbers:
    numbers = RunNumbers(run)
    if not _counted_by_facts(layout, run, numbers):
        numbers = RunNumbers(run)
        _counted_by_rows(layout, run, numbers)
    for source in RUN_REJECT_SOURCES:
        numbers.rejects += [
            f"{source.value}: {r.describe()}" for r in read_rejects(layout, run, source)
        ]
    numbers.ignored = ignored_files(runs_root, run)
    return numbers


def ignored_files(runs_root: AnyPath | None, run: str) -> dict[str, str]:
    """The files of the run's snapshot folder passed over, each with why."""
    if runs_root is None:
        return {}
    snapshots = runs_root / run / SNAPSHOTS_DIR
    return {
        f"{SNAPSHOTS_DIR}/{name}": why for name, why in list_snapshots(snapshots).ignored.items()
    }


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


def export_summary(
    layout: StoreLayout,
    options: ExportOptions | None = None,
    export: ExportSet | None = None,
    collect: bool = True,
) -> tuple[dict[str, Any], str]:
    """The splits and problems the report shows, and where they come from.

    ``export``'s when given; else the store is tallied as an export would be (``collect``,
    streamed, keeping no row), or, to stay cheap after a sync, the last export's manifest.
    """
    if export is not None:
        return export.summary(), "this export"
    if collect:
        return tally_export(layout.root, options).summary(), "the store as it is now"
    summary = _last_export(layout)
    if summary is None:
        return {"rows": {}, "runs": {}, "problems": []}, "no export yet"
    return summary, "the last export (training_dataset)"


def run_problems(problems: list[str], runs: list[str]) -> dict[str, list[str]]:
    """The export's problems by the run each names first (``"<run>: ..."``)."""
    known = set(runs)
    by_run: dict[str, list[str]] = {}
    for problem in problems:
        run = problem.split(":", 1)[0]
        if run in known:
            by_run.setdefault(run, []).append(problem)
    return by_run


def prompt_chars(layout: StoreLayout, run: str) -> list[int]:
    """Each prompt's length, in checkpoint order: the facts of the prompts' index, else the
    column."""
    infos = read_run_infos(layout, PROMPTS, run)
    if all("chars" in info for _, info in infos):
        return [info["chars"] for _, info in infos]
    return read_run_table(layout, PROMPTS, run, ["prompt_chars"])["prompt_chars"].to_pylist()


def runs_root_of(runs_dir: str | AnyPath | None) -> AnyPath | None:
    runs_root = as_path(runs_dir) if runs_dir is not None else None
    return runs_root if runs_root is not None and runs_root.is_dir() else None
