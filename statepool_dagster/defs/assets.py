"""The four run-partitioned assets, built in one step: episodes and snapshots in, states and
prompts out, then their asset checks.

One ``@multi_asset`` (subsettable) builds the selected assets of every run its step covers
(one, or many in a single-run backfill or a ``statepool sync`` batch), on several processes
when there are many, and writes the store's files itself; the IO manager only loads them
back. Metadata and check results are recorded per partition, so a run over many
partitions reports each on its own, and a run that fails does not hide the others'.
"""

import traceback
import warnings
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    Failure,
    MaterializeResult,
    MetadataValue,
    Output,
    TableColumn,
    TableSchema,
    multi_asset,
)

from ..core.config import Settings
from ..core.locations import as_path, shared_between_processes
from ..core.names import (
    COLUMN_SCHEMA,
    EPISODES,
    FINAL_ASSET,
    FINGERPRINT,
    GROUP,
    IGNORED_METADATA,
    NOTES,
    PROMPTS,
    ROW_COUNT,
    RUN_ASSETS,
    RUN_IGNORED_FILES,
    RUN_STATES,
    SNAPSHOTS,
    STATE_COUNT,
    STATES,
    STORE,
)
from ..core.stages import STAGES, RunJob, StageReport, run_stage
from ..core.store.arrow_memory import load_arrow
from ..core.store.schemas import EPISODE_COLUMNS, PROMPT_COLUMNS, SNAPSHOT_COLUMNS, STATE_COLUMNS
from .checks import CHECK_SPECS, CheckResult, check_evaluations, run_checks
from .partitions import runs_partitions
from .resources import StatepoolSettings
from .storage import enable_event_batches

# Loaded with the code location, once per process, not inside the first step of every run.
load_arrow()
# A multi-partition step's materializations stored as one batch, whatever the storage
# (PostgreSQL's bulk-inserts it); the SQLite storage of dagster.yaml sets it too.
enable_event_batches()


@dataclass
class RunBuild:
    """One run's build: a report per asset built, its check results, and the error that
    stopped the rest."""

    run: str
    reports: dict[str, StageReport] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    error: BaseException | None = None
    trace: str = ""


def _build_run(
    job: RunJob, assets: Sequence[str], checks: Sequence[AssetCheckKey] = ()
) -> RunBuild:
    """The selected stages of one run, in data order, up to the first that fails; then, if
    none failed, the selected checks (in the same worker, on the files it just wrote)."""
    build = RunBuild(job.run)
    try:
        for asset in assets:
            build.reports[asset] = STAGES[asset](job)
    except Exception as error:  # one run's failure must not hide the other runs' results
        build.error, build.trace = error, traceback.format_exc()
        return build
    build.checks = run_checks(job.settings.store_dir, job.run, checks, job)
    return build


def _build(
    settings: Settings,
    runs: Sequence[str],
    assets: Sequence[str],
    checks: Sequence[AssetCheckKey] = (),
) -> list[RunBuild]:
    """Build ``assets`` (in data order) of every run and check it: the one call into the core."""
    if not assets and not checks:
        return [RunBuild(run) for run in runs]
    # A forked worker's writes to memory:// would stay in the worker.
    shared = shared_between_processes(as_path(settings.store_dir))
    jobs = [RunJob(settings, run, frozenset(assets)) for run in runs]
    # run_stage runs each task under the run's store lock, on a fork pool when there are many.
    workers = settings.workers if shared else 1
    task = partial(_build_run, assets=tuple(assets), checks=tuple(checks))
    return run_stage(task, jobs, workers)


def _batched_writes(context: AssetExecutionContext) -> AbstractContextManager[None]:
    """The instance's storage writing what the step records in one transaction, if it can.

    Dagster stores each event the step yields while the step waits: all of them then go in
    together (see ``storage.py``). Other storages (PostgreSQL) write as usual.
    """
    storage = context.instance.event_log_storage
    batched = getattr(storage, "batched_writes", None)
    return batched() if batched is not None else nullcontext()


def _schema(columns: dict[str, str], types: dict[str, str]) -> TableSchema:
    return TableSchema(
        columns=[
            TableColumn(name, types.get(name, "string"), description=doc)
            for name, doc in columns.items()
        ]
    )


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


def _run_metadata(build: RunBuild, asset: str) -> dict[str, Any]:
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


def _spec(
    name: str,
    description: str,
    columns: dict[str, str],
    types: dict[str, str],
    kinds: set[str],
    deps: Sequence[str] = (),
) -> AssetSpec:
    return AssetSpec(
        name,
        description=description,
        deps=deps,
        group_name=GROUP,
        kinds=kinds,
        metadata={COLUMN_SCHEMA: _schema(columns, types)},
    ).with_io_manager_key(STORE)


RUN_ASSET_SPECS = [
    _spec(
        EPISODES,
        "Every usable line of the run's episodes.jsonl: flat fields to query, the full record "
        "kept.\n\nLines that cannot be used are set aside in rejects/<run>.jsonl with their "
        "line number.",
        EPISODE_COLUMNS,
        {"line": "int", "version": "int", "realtime": "float", "correct": "bool"},
        {"python", "parquet"},
    ),
    _spec(
        SNAPSHOTS,
        "One row per snapshots/skills_v<k>.json, in numeric version order, embeddings "
        "removed.\n\nFiles that do not match the name pattern are listed as ignored; unreadable "
        "ones are rejects. A file unchanged since the last materialization is not parsed again.",
        SNAPSHOT_COLUMNS,
        {"version": "int", "declared_version": "int", "n_cards": "int"},
        {"python", "parquet"},
    ),
    _spec(
        STATES,
        "What the curator saw at each checkpoint: snapshot k with the batch run under k-1 "
        "(else k).\n\nAlso written as the original script's files, "
        "state_pool/<run>/<state_id>.json. Each state carries its reference ops, the diff to "
        "the run's next library. Analyses and receipts come from the run's sidecars when it "
        "has them.",
        STATE_COLUMNS,
        {
            "version": "int",
            "library_version": "int",
            "batch_version": "int",
            "n_cards": "int",
            "n_episodes": "int",
        },
        {"python", "parquet", "json"},
        deps=[EPISODES, SNAPSHOTS],
    ),
    _spec(
        PROMPTS,
        "The curator prompt of every state, rendered exactly as the inference side renders "
        "it.\n\nA state whose JSON and prompt spec are unchanged keeps its prompt without "
        "re-rendering.",
        PROMPT_COLUMNS,
        {"version": "int", "prompt_chars": "int"},
        {"python", "parquet"},
        deps=[STATES],
    ),
]

RunAssetEvent = MaterializeResult | AssetMaterialization | AssetCheckEvaluation | Output


def _record(
    context: AssetExecutionContext,
    builds: list[RunBuild],
    assets: Sequence[str],
    checks: AbstractSet[AssetCheckKey],
) -> Iterator[RunAssetEvent]:
    """Every partition's materializations and check results, then each check's output."""
    for build in builds:
        for report in build.reports.values():
            for note in report.notes:
                context.log.info(f"{build.run}: {note}")
    failed = [build for build in builds if build.error is not None]
    if failed:
        # One output covers every partition of the step: what was built is recorded one
        # partition at a time instead (a failed run's stages before the failure too).
        for build in failed if len(builds) > 1 else ():
            context.log.error(f"{build.run} failed:\n{build.trace}")
        for build in builds:
            for asset in build.reports:
                metadata = _run_metadata(build, asset)
                yield AssetMaterialization(asset, partition=build.run, metadata=metadata)
    else:
        for asset in assets:
            for build in builds:
                # Dagster makes each partition's materialization from this, and stores
                # them as one batch (DAGSTER_EVENT_BATCH_SIZE, set in storage.py).
                context.add_asset_metadata(
                    _run_metadata(build, asset),
                    asset_key=AssetKey(asset),
                    partition_key=build.run,
                )
            yield MaterializeResult(asset_key=asset)
    for build in builds:
        if build.error is None:
            yield from check_evaluations(build.run, build.checks)
    for key in checks:  # each check's output, which the evaluations above stand for
        yield Output(None, context.assets_def.get_output_name_for_asset_check_key(key))


with warnings.catch_warnings():
    # The single-run backfill policy (beta in 1.13) is deliberate: one run, many partitions.
    warnings.simplefilter("ignore", BetaWarning)

    @multi_asset(
        specs=RUN_ASSET_SPECS,
        check_specs=CHECK_SPECS,
        can_subset=True,
        partitions_def=runs_partitions,
        backfill_policy=BackfillPolicy.single_run(),
    )
    def run_assets(
        context: AssetExecutionContext, statepool: StatepoolSettings
    ) -> Iterator[RunAssetEvent]:
        """Build each run's selected assets in the data's order, then evaluate its checks."""
        settings = statepool.settings()
        selected = context.selected_asset_keys
        assets = [asset for asset in RUN_ASSETS if AssetKey(asset) in selected]
        checks = context.selected_asset_check_keys
        builds = _build(settings, context.partition_keys, assets, list(checks))
        failed = [build for build in builds if build.error is not None]
        with _batched_writes(context):
            yield from _record(context, builds, assets, checks)
        if len(failed) == 1:
            raise failed[0].error
        if failed:
            raise Failure(
                f"{len(failed)} of {len(builds)} runs failed: "
                + "; ".join(f"{b.run}: {b.error}" for b in failed)
            )
