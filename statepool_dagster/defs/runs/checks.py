"""Asset checks of the run assets, one result per run partition, shown beside each
materialization in the UI: one check per severity.

- ``checkpoint_states`` / ``inputs_clean`` (WARN): nothing of the run's files was set
  aside as a reject, every snapshot was paired with an episode batch, and every
  snapshot's inner version equals its file name's. Its description says which of the
  three failed; its metadata keeps each one's facts.
- ``curator_prompts`` / ``states_complete`` (ERROR): a run with snapshots has states, and
  every state has a non-empty prompt.

They are ``check_specs`` of the run assets' step (``assets.py``): the step evaluates the
selected ones for every run it covers, after building, so a run over many partitions
records each partition's results too. They read the small facts each stage keeps per
checkpoint in its table's index, not the tables: a new checkpoint of a long run costs
them about what it costs a short run's. Each can still be launched on its own from the UI.
"""

import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    PreviewWarning,
)

from ...core.names import PROMPTS, REJECTS, SNAPSHOTS, STATES
from ...core.stages.job import OpenTables
from ...core.store.layout import StoreLayout, read_rejects
from ...core.store.part_files import part_version
from ...core.store.reading import read_run_infos, read_run_table
from .partitions import runs_partitions

INPUTS_CLEAN = "inputs_clean"
STATES_COMPLETE = "states_complete"

# What the checks read of each table, by column, and the checkpoint's fact (its ``info``
# in the table's index) that holds the same value (None: the checkpoint's version).
CHECKED = {
    SNAPSHOTS: {"version": "version", "declared_version": "declared", "file": "file"},
    STATES: {"version": None, "state_id": "state_id"},
    PROMPTS: {"prompt_chars": "chars", "state_id": "state_id"},
}
SHOWN = 20  # items of each list the details show (the metadata lists keep them all)


class _Run:
    """One run's store files, each table's checked columns read at most once (from the
    ``tables`` a build just saved, if given: its checks then read no file again)."""

    def __init__(self, layout: StoreLayout, run: str, tables: OpenTables | None = None):
        self.layout, self.run, self.tables = layout, run, tables
        self._tables: dict[str, dict[str, list[Any]]] = {}

    def column(self, asset: str, name: str) -> list[Any]:
        if asset not in self._tables:
            self._tables[asset] = self._read(asset)
        return self._tables[asset][name]

    def _read(self, asset: str) -> dict[str, list[Any]]:
        facts = CHECKED[asset]
        if self.tables is not None:
            table = self.tables.open(asset, self.run)
            infos = [(name, table.parts[name].info) for name in table.names()]
        else:
            infos = read_run_infos(self.layout, asset, self.run)
        wanted = {f for f in facts.values() if f is not None}
        if all(wanted <= info.keys() for _, info in infos):
            return {
                column: [part_version(n) if f is None else i[f] for n, i in infos]
                for column, f in facts.items()
            }
        # A store written before the stages kept these facts: its rows, read once.
        table = read_run_table(self.layout, asset, self.run, columns=list(facts))
        return {column: table.column(column).to_pylist() for column in facts}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _section(ok: str, problem: str, items: list[Any]) -> str:
    """One line of the details, and under a problem the first items it is about."""
    if not items:
        return f"- passed: {ok}"
    shown = [f"  - {item}" for item in items[:SHOWN]]
    more = [f"  - … {len(items) - SHOWN} more"] if len(items) > SHOWN else []
    return "\n".join([f"- **failed: {problem}**", *shown, *more])


def inputs_clean(run: _Run) -> dict[str, Any]:
    rejects = [r.describe() for r in read_rejects(run.layout, run.run)]
    skipped = sorted(set(run.column(SNAPSHOTS, "version")) - set(run.column(STATES, "version")))
    files, declared = run.column(SNAPSHOTS, "file"), run.column(SNAPSHOTS, "declared_version")
    pairs = zip(files, run.column(SNAPSHOTS, "version"), declared, strict=True)
    mismatched = [f for f, v, d in pairs if d != v]
    parts = [  # (what passing means, what failing means, what failed)
        ("no rejects", f"{_plural(len(rejects), 'reject')} set aside", rejects),
        (
            "every snapshot paired with an episode batch",
            f"{_plural(len(skipped), 'snapshot')} without an episode batch (skipped)",
            [f"version {v}" for v in skipped],
        ),
        (
            "every snapshot's version equals its file name's",
            f"{_plural(len(mismatched), 'snapshot')} whose version differs from its file name's",
            mismatched,
        ),
    ]
    problems = [problem for _, problem, items in parts if items]
    return dict(
        passed=not problems,
        severity=AssetCheckSeverity.WARN,
        description="; ".join(problems) or "no rejects, every snapshot paired, versions match",
        metadata={
            REJECTS: len(rejects),
            "skipped_versions": MetadataValue.json(skipped),
            "mismatched_files": MetadataValue.json(mismatched),
            "details": MetadataValue.md("\n".join(_section(*part) for part in parts)),
        },
    )


def states_complete(run: _Run) -> dict[str, Any]:
    snapshots, ids = len(run.column(SNAPSHOTS, "version")), run.column(STATES, "state_id")
    chars = run.column(PROMPTS, "prompt_chars")
    prompted = {sid for sid, n in zip(run.column(PROMPTS, "state_id"), chars, strict=True) if n}
    missing = sorted(set(ids) - prompted)
    none = snapshots > 0 and not ids
    problems = [f"no states from {_plural(snapshots, 'snapshot')}"] if none else []
    if missing:
        problems.append(f"{_plural(len(missing), 'state')} without a prompt")
    return dict(
        passed=not problems,
        severity=AssetCheckSeverity.ERROR,
        description="; ".join(problems) or f"{_plural(len(ids), 'state')}, each with its prompt",
        metadata={
            "snapshots": snapshots,
            "states": len(ids),
            "missing": MetadataValue.json(missing),
        },
    )


_CHECKS: dict[AssetCheckKey, tuple[Callable[[_Run], dict[str, Any]], str]] = {
    AssetCheckKey(AssetKey(STATES), INPUTS_CLEAN): (
        inputs_clean,
        "The run's files went in whole: no episode line, snapshot or sidecar file was set "
        "aside as a reject, every snapshot was paired with an episode batch, and the "
        "version inside each snapshot equals its file name's. A failure says which.",
    ),
    AssetCheckKey(AssetKey(PROMPTS), STATES_COMPLETE): (
        states_complete,
        "A run with snapshots has at least one checkpoint state, and every state has a "
        "non-empty rendered prompt (states without one listed).",
    ),
}

with warnings.catch_warnings():
    # Partitioned checks are "preview" in 1.13; they are what the UI needs per run.
    warnings.simplefilter("ignore", PreviewWarning)
    CHECK_SPECS = [
        AssetCheckSpec(
            key.name, asset=key.asset_key, description=description, partitions_def=runs_partitions
        )
        for key, (_, description) in _CHECKS.items()
    ]


CheckResult = tuple[AssetCheckKey, dict[str, Any]]


def run_checks(
    store_dir: str, run: str, keys: Iterable[AssetCheckKey], tables: OpenTables | None = None
) -> list[CheckResult]:
    """Each check of ``keys`` on one run's store files (picklable: a build worker runs them;
    ``tables``: the build's, whose saved tables it reads)."""
    selected = set(keys)
    files = _Run(StoreLayout(store_dir), run, tables)
    return [(key, check(files)) for key, (check, _) in _CHECKS.items() if key in selected]


def check_evaluations(run: str, results: Iterable[CheckResult]) -> Iterator[AssetCheckEvaluation]:
    """``run_checks``' results as evaluations of the run's partition.

    An ``AssetCheckResult`` takes its partition from the step, which has none when it
    covers several: the evaluation it would become is yielded instead, partition set.
    (Without a target materialization, Dagster relates a result to the latest
    materialization by run and time, which is right here: both come from this step.)
    """
    for key, result in results:
        yield AssetCheckEvaluation(
            asset_key=key.asset_key,
            check_name=key.name,
            partition=run,
            blocking=False,
            **result,
        )
