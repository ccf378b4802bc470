"""Asset checks of the run assets, one result per run partition, shown beside each
materialization in the UI.

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

from ..core.names import PROMPTS, REJECTS, SNAPSHOTS, STATES
from ..core.stages.job import RunJob
from ..core.store.layout import StoreLayout
from ..core.store.part_files import part_version
from ..core.store.pool import read_rejects
from ..core.store.reading import read_run_infos, read_run_table
from .partitions import runs_partitions

# What the checks read of each table, by column, and the checkpoint's fact (its ``info``
# in the table's index) that holds the same value (None: the checkpoint's version).
CHECKED = {
    SNAPSHOTS: {"version": "version", "declared_version": "declared", "file": "file"},
    STATES: {"version": None, "state_id": "state_id"},
    PROMPTS: {"prompt_chars": "chars", "state_id": "state_id"},
}


class _Run:
    """One run's store files, each table's checked columns read at most once (from the
    tables ``job`` just saved, if given: a build's checks then read no file again)."""

    def __init__(self, layout: StoreLayout, run: str, job: RunJob | None = None):
        self.layout, self.run, self.job = layout, run, job
        self._tables: dict[str, dict[str, list[Any]]] = {}

    def column(self, asset: str, name: str) -> list[Any]:
        if asset not in self._tables:
            self._tables[asset] = self._read(asset)
        return self._tables[asset][name]

    def _read(self, asset: str) -> dict[str, list[Any]]:
        facts = CHECKED[asset]
        if self.job is not None:
            table = self.job.table(asset)
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


def no_rejects(run: _Run) -> dict[str, Any]:
    rejects = read_rejects(run.layout, run.run)
    shown = [f"- {r.describe()}" for r in rejects[:20]]
    return dict(
        passed=not rejects,
        severity=AssetCheckSeverity.WARN,
        metadata={REJECTS: len(rejects), "details": MetadataValue.md("\n".join(shown) or "none")},
    )


def snapshots_paired(run: _Run) -> dict[str, Any]:
    skipped = sorted(set(run.column(SNAPSHOTS, "version")) - set(run.column(STATES, "version")))
    return dict(
        passed=not skipped,
        severity=AssetCheckSeverity.WARN,
        metadata={"skipped_versions": MetadataValue.json(skipped)},
    )


def snapshot_versions_match(run: _Run) -> dict[str, Any]:
    version = run.column(SNAPSHOTS, "version")
    declared = run.column(SNAPSHOTS, "declared_version")
    files = run.column(SNAPSHOTS, "file")
    mismatched = [f for f, v, d in zip(files, version, declared, strict=True) if d != v]
    return dict(
        passed=not mismatched,
        severity=AssetCheckSeverity.WARN,
        metadata={"mismatched_files": MetadataValue.json(mismatched)},
    )


def states_exist(run: _Run) -> dict[str, Any]:
    snapshots, states = len(run.column(SNAPSHOTS, "version")), len(run.column(STATES, "version"))
    return dict(
        passed=snapshots == 0 or states > 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"snapshots": snapshots, "states": states},
    )


def every_state_has_prompt(run: _Run) -> dict[str, Any]:
    chars = run.column(PROMPTS, "prompt_chars")
    ids = run.column(PROMPTS, "state_id")
    prompted = {sid for sid, n in zip(ids, chars, strict=True) if n > 0}
    missing = sorted(set(run.column(STATES, "state_id")) - prompted)
    return dict(
        passed=not missing,
        severity=AssetCheckSeverity.ERROR,
        metadata={"missing": MetadataValue.json(missing)},
    )


_CHECKS: dict[AssetCheckKey, tuple[Callable[[_Run], dict[str, Any]], str]] = {
    AssetCheckKey(AssetKey(STATES), "no_rejects"): (
        no_rejects,
        "No episode line, snapshot or sidecar file of the run was set aside as a reject.",
    ),
    AssetCheckKey(AssetKey(STATES), "snapshots_paired"): (
        snapshots_paired,
        "Every snapshot was paired with an episode batch (skipped versions listed).",
    ),
    AssetCheckKey(AssetKey(SNAPSHOTS), "snapshot_versions_match"): (
        snapshot_versions_match,
        "The version inside each snapshot equals the one in its file name.",
    ),
    AssetCheckKey(AssetKey(STATES), "states_exist"): (
        states_exist,
        "A run with snapshots has at least one checkpoint state.",
    ),
    AssetCheckKey(AssetKey(PROMPTS), "every_state_has_prompt"): (
        every_state_has_prompt,
        "Every checkpoint state has a non-empty rendered prompt.",
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
    store_dir: str, run: str, keys: Iterable[AssetCheckKey], job: RunJob | None = None
) -> list[CheckResult]:
    """Each check of ``keys`` on one run's store files (picklable: a build worker runs them;
    ``job``: the build's, whose saved tables it reads)."""
    selected = set(keys)
    files = _Run(StoreLayout(store_dir), run, job)
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


def evaluate_checks(
    store_dir: str, runs: list[str], keys: Iterable[AssetCheckKey]
) -> Iterator[AssetCheckEvaluation]:
    """Each check of ``keys`` on each run, as a result for that run's partition."""
    keys = list(keys)
    for run in runs:
        yield from check_evaluations(run, run_checks(store_dir, run, keys))
