"""The four run-partitioned assets: episodes and snapshots in, states and prompts out.

Each asset runs one core stage (``core/stages.py``) per partition of its run, on
several processes when a run covers many partitions (``BackfillPolicy.single_run``),
and writes the store's files itself; the IO manager only loads them back. Metadata
is recorded per partition, so one run over many partitions reports each on its own.
"""

import warnings
from collections.abc import Callable
from typing import Any

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    BetaWarning,
    MetadataValue,
    TableColumn,
    TableSchema,
)
from dagster import asset as _asset

from .core.build import RunJob, StageReport, run_stage
from .core.build.episodes import build_episodes
from .core.build.prompts import build_prompts
from .core.build.snapshots import build_snapshots
from .core.build.states import build_states
from .core.locations import as_path, shared_between_processes
from .core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from .core.store.tables import (
    EPISODE_COLUMNS,
    PROMPT_COLUMNS,
    SNAPSHOT_COLUMNS,
    STATE_COLUMNS,
    load_arrow,
)
from .fingerprints import FINGERPRINT_KEY
from .partitions import runs_partitions
from .resources import StatepoolSettings

GROUP = "statepool"
STORE = "statepool_store"

# Loaded with the code location, once per process, not inside the first step of every run.
load_arrow()


def _schema(columns: dict[str, str], types: dict[str, str]) -> TableSchema:
    return TableSchema(
        columns=[
            TableColumn(name, types.get(name, "string"), description=doc)
            for name, doc in columns.items()
        ]
    )


def _metadata(report: StageReport) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "dagster/row_count": report.rows,
        FINGERPRINT_KEY: report.fingerprint,
        **report.values,
    }
    metadata.update({k: MetadataValue.json(v) for k, v in report.json.items()})
    metadata.update({k: MetadataValue.md(v) for k, v in report.markdown.items()})
    if report.notes:
        metadata["notes"] = MetadataValue.md("\n".join(f"- {n}" for n in report.notes))
    return metadata


def _materialize(
    context: AssetExecutionContext,
    statepool: StatepoolSettings,
    stage: Callable[[RunJob], StageReport],
) -> None:
    settings = statepool.settings()
    jobs = [RunJob(settings, run) for run in context.partition_keys]
    # A forked worker's writes to memory:// would stay in the worker.
    shared = shared_between_processes(as_path(settings.store_dir))
    for report in run_stage(stage, jobs, settings.workers if shared else 1):
        for note in report.notes:
            context.log.info(f"{report.run}: {note}")
        context.add_asset_metadata(_metadata(report), partition_key=report.run)


def asset(**kwargs):
    """``@asset`` whose single-run backfill policy (beta in 1.13) is deliberate."""

    def decorate(fn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BetaWarning)
            return _asset(**kwargs)(fn)

    return decorate


def _spec(name: str, columns: dict[str, str], types: dict[str, str], kinds: set[str]) -> dict:
    return dict(
        name=name,
        partitions_def=runs_partitions,
        backfill_policy=BackfillPolicy.single_run(),
        group_name=GROUP,
        kinds=kinds,
        io_manager_key=STORE,
        metadata={"dagster/column_schema": _schema(columns, types)},
    )


@asset(
    **_spec(
        EPISODES,
        EPISODE_COLUMNS,
        {"line": "int", "version": "int", "realtime": "float", "correct": "bool"},
        {"python", "parquet"},
    )
)
def run_episodes(context: AssetExecutionContext, statepool: StatepoolSettings) -> None:
    """Every usable line of the run's episodes.jsonl: flat fields to query, the full record kept.

    Lines that cannot be used are set aside in rejects/<run>.jsonl with their line number.
    """
    _materialize(context, statepool, build_episodes)


@asset(
    **_spec(
        SNAPSHOTS,
        SNAPSHOT_COLUMNS,
        {"version": "int", "declared_version": "int", "n_cards": "int"},
        {"python", "parquet"},
    )
)
def skill_snapshots(context: AssetExecutionContext, statepool: StatepoolSettings) -> None:
    """One row per snapshots/skills_v<k>.json, in numeric version order, embeddings removed.

    Files that do not match the name pattern are listed as ignored; unreadable ones are
    rejects. A file unchanged since the last materialization is not parsed again.
    """
    _materialize(context, statepool, build_snapshots)


@asset(
    **_spec(
        STATES,
        STATE_COLUMNS,
        {
            "version": "int",
            "library_version": "int",
            "batch_version": "int",
            "n_cards": "int",
            "n_episodes": "int",
        },
        {"python", "parquet", "json"},
    ),
    deps=[run_episodes, skill_snapshots],
)
def checkpoint_states(context: AssetExecutionContext, statepool: StatepoolSettings) -> None:
    """What the curator saw at each checkpoint: snapshot k with the batch run under k-1 (else k).

    Also written as the original script's files, state_pool/<run>/<state_id>.json. Each
    state carries its reference ops, the diff to the run's next library. Analyses and
    receipts come from the run's sidecars when it has them.
    """
    _materialize(context, statepool, build_states)


@asset(
    **_spec(
        PROMPTS,
        PROMPT_COLUMNS,
        {"version": "int", "prompt_chars": "int"},
        {"python", "parquet"},
    ),
    deps=[checkpoint_states],
)
def curator_prompts(context: AssetExecutionContext, statepool: StatepoolSettings) -> None:
    """The curator prompt of every state, rendered exactly as the inference side renders it.

    A state whose JSON and prompt spec are unchanged keeps its prompt without re-rendering.
    """
    _materialize(context, statepool, build_prompts)


statepool_assets = [run_episodes, skill_snapshots, checkpoint_states, curator_prompts]
