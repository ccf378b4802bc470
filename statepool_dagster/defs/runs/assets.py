"""The four run-partitioned assets, built in one step: episodes and snapshots in, states and
prompts out, then their asset checks.

One ``@multi_asset`` (subsettable) builds the selected assets of every run its step covers
(one, or many in a single-run backfill or a ``statepool sync`` batch), on several processes
when there are many, and writes the store's files itself; the IO manager only loads them
back. Each run is recorded as soon as its build returns, while the workers build the next
ones: its materializations with their metadata, then its check results. A run over many
partitions so reports each on its own, and a run that fails does not hide the others'.
"""

import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import closing
from functools import partial

from dagster import (
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    Failure,
    TableColumn,
    TableSchema,
    multi_asset,
)

from ...core.config import Settings
from ...core.locations import as_path, shared_between_processes
from ...core.names import (
    COLUMN_SCHEMA,
    EPISODES,
    GROUP,
    PROMPTS,
    RUN_ASSETS,
    SNAPSHOTS,
    STATES,
    STORE,
)
from ...core.stages import OpenTables, build_stages, stream_each
from ...core.store.rows import load_arrow
from ...core.store.schemas import EPISODE_COLUMNS, PROMPT_COLUMNS, SNAPSHOT_COLUMNS, STATE_COLUMNS
from ...core.words import plural
from ..resources import StatepoolSettings
from .checks import CHECK_SPECS, run_checks
from .partitions import runs_partitions
from .recording import (
    RunAssetEvent,
    RunBuild,
    check_outputs,
    downstream_in_run,
    record_as_built,
    record_together,
)

# Loaded with the code location, once per process, not inside the first step of every run.
load_arrow()


def _build_run(
    run: str,
    settings: Settings,
    tables: OpenTables,
    assets: Sequence[str],
    checks: Sequence[AssetCheckKey] = (),
) -> RunBuild:
    """The selected stages of one run, in data order, up to the first that fails; then, if
    none failed, the selected checks (in the same worker, on the tables it just saved)."""
    build = RunBuild(run)
    try:
        for asset, report in build_stages(run, settings, tables, assets):
            build.reports[asset] = report
    except Exception as error:  # one run's failure must not hide the other runs' results
        build.error, build.trace = error, traceback.format_exc()
        return build
    build.checks = run_checks(settings.store_dir, run, checks, tables)
    return build


def _builds(
    settings: Settings,
    runs: Sequence[str],
    assets: Sequence[str],
    checks: Sequence[AssetCheckKey] = (),
) -> Iterator[list[RunBuild]]:
    """Build ``assets`` (in data order) of every run and check it: the one call into the core.

    The builds come back in run order as they finish, each time every one ready: the step
    records them while the workers build the rest.
    """
    if not assets and not checks:
        yield [RunBuild(run) for run in runs]
        return
    # A forked worker's writes to memory:// would stay in the worker.
    shared = shared_between_processes(as_path(settings.store_dir))
    # stream_each runs each run's task under its store lock, on a fork pool when there are many.
    workers = settings.workers if shared else 1
    task = partial(_build_run, assets=tuple(assets), checks=tuple(checks))
    yield from stream_each(task, settings, runs, workers)


def _schema(columns: dict[str, str], types: dict[str, str]) -> TableSchema:
    return TableSchema(
        columns=[
            TableColumn(name, types.get(name, "string"), description=doc)
            for name, doc in columns.items()
        ]
    )


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
        skippable=True,  # recorded by hand, run by run, as each is built (recording.py)
    ).with_io_manager_key(STORE)


# A tuple: the defs loader would take a module's list of specs for assets of their own.
RUN_ASSET_SPECS = (
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
)

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
        """Build each run's selected assets in the data's order and evaluate its checks,
        recording each run as soon as it is built."""
        selected = context.selected_asset_keys
        assets = [asset for asset in RUN_ASSETS if AssetKey(asset) in selected]
        checks = context.selected_asset_check_keys
        runs = context.partition_keys
        with closing(_builds(statepool.settings(), runs, assets, list(checks))) as streamed:
            builds: list[RunBuild] = []
            if downstream_in_run(context):
                builds = [build for ready in streamed for build in ready]
                yield from record_together(context, builds, assets)
            else:
                yield from record_as_built(context, streamed, builds, alone=len(runs) == 1)
        yield from check_outputs(context, checks)
        failed = [build for build in builds if build.error is not None]
        if len(failed) == 1:
            raise failed[0].error
        if failed:
            raise Failure(
                f"{len(failed)} of {plural(len(runs), 'run')} failed: "
                + "; ".join(f"{b.run}: {b.error}" for b in failed)
            )
