"""What the run assets' step records of each run it built: materializations, then check results.

``record_as_built`` records each run soon after its build returns, while the workers build
the next ones: its materializations, yielded by hand with the partition set (the run assets
are ``skippable``), then its check results, :data:`RECORD_AT_LEAST` runs to a write. A run
that also materializes an asset downstream of the run assets records as Dagster makes
outputs instead (``record_together``): every run built first, then the materializations as
each asset's output, then the check results. Why: docs/performance.md, "Dagster's
bookkeeping".
"""

from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    MaterializeResult,
    MetadataValue,
    Output,
)

from ...core.names import (
    FINAL_ASSET,
    FINGERPRINT,
    IGNORED_METADATA,
    NOTES,
    ROW_COUNT,
    RUN_IGNORED_FILES,
    RUN_STATES,
    STATE_COUNT,
    STATES,
)
from ...core.stages import StageReport
from .checks import CheckResult, check_evaluations

RunAssetEvent = MaterializeResult | AssetMaterialization | AssetCheckEvaluation | Output


@dataclass
class RunBuild:
    """One run's build: a report per asset built, its check results, and the error that
    stopped the rest."""

    run: str
    reports: dict[str, StageReport] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    error: BaseException | None = None
    trace: str = ""


def _metadata(report: StageReport) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        ROW_COUNT: report.rows,
        FINGERPRINT: report.fingerprint,
        **report.values,
    }
    metadata.update({k: MetadataValue.json(v) for k, v in report.json.items()})
    metadata.update({k: MetadataValue.md(v) for k, v in report.markdown.items()})
    if report.notes:
        metadata[NOTES] = MetadataValue.md("\n".join(f"- {n}" for n in report.notes))
    return metadata


def run_metadata(build: RunBuild, asset: str) -> dict[str, Any]:
    """``asset``'s metadata; the final asset's with the run's totals when the step built
    what they count (``statepool status`` reads them there)."""
    metadata = _metadata(build.reports[asset])
    counted = {STATES, *(source for source, _ in IGNORED_METADATA)}
    if asset == FINAL_ASSET and counted <= build.reports.keys():
        metadata[RUN_STATES] = build.reports[STATES].values[STATE_COUNT]
        metadata[RUN_IGNORED_FILES] = sum(
            len(build.reports[source].json.get(key) or {}) for source, key in IGNORED_METADATA
        )
    return metadata


def batched_writes(context: AssetExecutionContext) -> AbstractContextManager[None]:
    """The instance's storage writing what the step records inside in one transaction.

    Dagster stores each event the step yields while the step is suspended at the yield, so
    the events recorded inside go in together, each asset's row once (``storages/sqlite.py``,
    ``storages/postgres.py``). Dagster's own storages write event by event.
    """
    storage = context.instance.event_log_storage
    batched = getattr(storage, "batched_writes", None)
    return batched() if batched is not None else nullcontext()


def downstream_in_run(context: AssetExecutionContext) -> bool:
    """Whether the run also materializes an asset that depends on the run assets."""
    ours = set(context.assets_def.keys)
    graph = context.job_def.asset_layer.asset_graph
    keys = context.run.asset_selection or set(graph.executable_asset_keys)
    return any(not graph.get(key).parent_keys.isdisjoint(ours) for key in set(keys) - ours)


def _log(context: AssetExecutionContext, build: RunBuild, alone: bool) -> None:
    for report in build.reports.values():
        for note in report.notes:
            context.log.info(f"{build.run}: {note}")
    if build.error is not None and not alone:  # alone, the step's own error says it
        context.log.error(f"{build.run} failed:\n{build.trace}")


# Dagster tags a materialization it makes from an output with a data version (for an asset
# without a code version, new in every run); a downstream asset's record of what it read
# is compared with it. Ours carry one the same way, so that ``training_dataset`` shows as
# unsynced in the UI once a run it read is built again.
DATA_VERSION_TAG = "dagster/data_version"


def _materializations(
    context: AssetExecutionContext, build: RunBuild
) -> Iterator[AssetMaterialization]:
    tags = {DATA_VERSION_TAG: context.run.run_id}
    for asset in build.reports:  # in data order; a failed run's stages before the failure too
        metadata = run_metadata(build, asset)
        yield AssetMaterialization(asset, partition=build.run, metadata=metadata, tags=tags)


# Runs recorded in one write, at least (fewer at the end): each write costs a commit and a
# row per asset. Recording each run alone cost 10% more CPU on 200 runs; 8 keeps what the
# last write records after the last build small (a Dagster run covers up to 48).
RECORD_AT_LEAST = 8


def at_least(batches: Iterator[list[RunBuild]], size: int) -> Iterator[list[RunBuild]]:
    """``batches`` joined up to ``size`` builds at least (the last may be short)."""
    group: list[RunBuild] = []
    for batch in batches:
        group += batch
        if len(group) >= size:
            yield group
            group = []
    if group:
        yield group


def record_as_built(
    context: AssetExecutionContext,
    builds: Iterator[list[RunBuild]],
    recorded: list[RunBuild],
    alone: bool,
) -> Iterator[RunAssetEvent]:
    """Each run's materializations, then its check results, once :data:`RECORD_AT_LEAST`
    builds (or the last) have returned; each run then added to ``recorded``.

    The runs of a write are written together and committed before the step waits for the
    next build: no write lock is held while the workers build.
    """
    for ready in at_least(builds, RECORD_AT_LEAST):
        with batched_writes(context):
            for build in ready:
                _log(context, build, alone)
                yield from _materializations(context, build)
                if build.error is None:
                    yield from check_evaluations(build.run, build.checks)
        recorded.extend(ready)


def record_together(
    context: AssetExecutionContext, builds: Sequence[RunBuild], assets: Sequence[str]
) -> Iterator[RunAssetEvent]:
    """Every run's materializations as each asset's output (what a step downstream in the
    run waits for), then every run's check results; all in one write."""
    with batched_writes(context):
        for build in builds:
            _log(context, build, len(builds) == 1)
        if any(build.error is not None for build in builds):
            # One output covers every partition of the step: what was built is recorded one
            # partition at a time instead (the steps downstream are skipped: the step fails).
            for build in builds:
                yield from _materializations(context, build)
        else:
            for asset in assets:
                for build in builds:
                    context.add_asset_metadata(
                        run_metadata(build, asset),
                        asset_key=AssetKey(asset),
                        partition_key=build.run,
                    )
                yield MaterializeResult(asset_key=asset)
        for build in builds:
            if build.error is None:
                yield from check_evaluations(build.run, build.checks)


def check_outputs(
    context: AssetExecutionContext, checks: AbstractSet[AssetCheckKey]
) -> Iterator[Output]:
    """Each selected check's output, which the evaluations recorded stand for."""
    for key in checks:
        yield Output(None, context.assets_def.get_output_name_for_asset_check_key(key))
