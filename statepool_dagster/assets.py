"""The four run-partitioned assets: episodes and snapshots in, states and prompts out.

Each is a thin wrapper over the core; the store's Parquet files are written by
the IO manager, the state-pool JSON files and rejects by the core's store module.
"""

import statistics
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
from dagster import (
    AssetExecutionContext,
    BetaWarning,
    DataVersion,
    MetadataValue,
    Output,
    TableColumn,
    TableSchema,
    asset,
)

from .core.collect import read_run_episodes, read_run_snapshots, run_notes
from .core.join import join_states
from .core.render import build_curator_prompt
from .core.run_files import fingerprint_run
from .core.run_names import check_run_name
from .core.settings import Settings
from .core.sidecars import read_sidecars
from .core.store import StoreLayout, update_rejects, write_state_pool
from .core.tables import (
    EPISODE_COLUMNS,
    PROMPT_COLUMNS,
    SNAPSHOT_COLUMNS,
    STATE_COLUMNS,
    batches_from_table,
    episodes_table,
    prompts_table,
    rejects_jsonl,
    snapshots_from_table,
    snapshots_table,
    states_from_table,
    states_table,
)
from .partitions import runs_partitions
from .resources import StatepoolSettings
from .tags import SOURCE_FINGERPRINT

GROUP = "statepool"
STORE = "statepool_store"


def _schema(columns: dict[str, str], types: dict[str, str]) -> TableSchema:
    return TableSchema(
        columns=[
            TableColumn(name, types.get(name, "string"), description=doc)
            for name, doc in columns.items()
        ]
    )


def _run_path(settings: Settings, run: str) -> Path:
    return Path(settings.runs_dir) / check_run_name(run)


def _source_fingerprint(context: AssetExecutionContext, run_path: Path) -> str:
    """The fingerprint the run was requested for, else the files' fingerprint now."""
    return context.run.tags.get(SOURCE_FINGERPRINT) or fingerprint_run(run_path).digest


def _preview(frame: pd.DataFrame, columns: list[str], rows: int = 10) -> MetadataValue:
    if frame.empty:
        return MetadataValue.md("_no rows_")
    return MetadataValue.md(frame[columns].head(rows).to_markdown(index=False))


def _output(frame: pd.DataFrame, metadata: dict[str, Any], fingerprint: str) -> Output:
    """The table, its metadata, and the source fingerprint as its data version."""
    with warnings.catch_warnings():
        # Data versions are beta in 1.13; we rely on them on purpose (see fingerprints.py).
        warnings.simplefilter("ignore", BetaWarning)
        return Output(frame, metadata=metadata, data_version=DataVersion(fingerprint))


def _common(frame: pd.DataFrame, fingerprint: str) -> dict[str, Any]:
    return {"dagster/row_count": len(frame), "source_fingerprint": fingerprint}


def _notes(context: AssetExecutionContext, path: Path) -> dict[str, Any]:
    notes = run_notes(path)
    for note in notes:
        context.log.info(f"{context.partition_key}: {note}")
    return {"notes": MetadataValue.md("\n".join(f"- {n}" for n in notes))} if notes else {}


@asset(
    partitions_def=runs_partitions,
    group_name=GROUP,
    kinds={"python", "parquet"},
    io_manager_key=STORE,
    metadata={
        "dagster/column_schema": _schema(
            EPISODE_COLUMNS,
            {"line": "int", "version": "int", "realtime": "float", "correct": "bool"},
        )
    },
)
def run_episodes(
    context: AssetExecutionContext, statepool: StatepoolSettings
) -> Output[pd.DataFrame]:
    """Every usable line of the run's episodes.jsonl: flat fields to query, the full record kept.

    Lines that cannot be used are set aside in rejects/<run>.jsonl with their line number.
    """
    settings = statepool.settings()
    run = context.partition_key
    path = _run_path(settings, run)
    fingerprint = _source_fingerprint(context, path)
    read = read_run_episodes(path, run, strict=settings.strict)
    update_rejects(
        StoreLayout(settings.store_dir), run, "episodes", rejects_jsonl(read.rejects, "episodes")
    )
    frame = episodes_table(read.episodes)
    accuracy = (
        frame.dropna(subset=["correct"]).groupby("version")["correct"].mean().round(3).to_dict()
    )
    metadata = {
        **_common(frame, fingerprint),
        **_notes(context, path),
        "episodes": len(frame),
        "versions": MetadataValue.json(sorted(int(v) for v in frame["version"].unique())),
        "accuracy_by_version": MetadataValue.json({str(k): float(v) for k, v in accuracy.items()}),
        "rejects": len(read.rejects),
        "blank_lines": read.blank_lines,
        "preview": _preview(frame, ["line", "version", "id", "task", "gt", "response", "correct"]),
    }
    if read.rejects:
        metadata["reject_details"] = MetadataValue.md(
            "\n".join(f"- {r.describe()}" for r in read.rejects[:50])
        )
    return _output(frame, metadata, fingerprint)


@asset(
    partitions_def=runs_partitions,
    group_name=GROUP,
    kinds={"python", "parquet"},
    io_manager_key=STORE,
    metadata={
        "dagster/column_schema": _schema(
            SNAPSHOT_COLUMNS, {"version": "int", "declared_version": "int", "n_cards": "int"}
        )
    },
)
def skill_snapshots(
    context: AssetExecutionContext, statepool: StatepoolSettings
) -> Output[pd.DataFrame]:
    """One row per snapshots/skills_v<k>.json, in numeric version order, embeddings removed.

    Files that do not match the name pattern are listed as ignored; unreadable ones are rejects.
    """
    settings = statepool.settings()
    run = context.partition_key
    path = _run_path(settings, run)
    fingerprint = _source_fingerprint(context, path)
    read = read_run_snapshots(path, run, strict=settings.strict)
    update_rejects(
        StoreLayout(settings.store_dir), run, "snapshots", rejects_jsonl(read.rejects, "snapshots")
    )
    frame = snapshots_table(read.snapshots)
    metadata = {
        **_common(frame, fingerprint),
        **_notes(context, path),
        "snapshots": len(frame),
        "versions": MetadataValue.json([int(v) for v in frame["version"]]),
        "cards_by_version": MetadataValue.json(
            {str(int(v)): int(n) for v, n in zip(frame["version"], frame["n_cards"], strict=True)}
        ),
        "rejects": len(read.rejects),
        "ignored_files": MetadataValue.json(read.ignored),
        "preview": _preview(frame, ["version", "file", "declared_version", "n_cards"]),
    }
    return _output(frame, metadata, fingerprint)


@asset(
    partitions_def=runs_partitions,
    group_name=GROUP,
    kinds={"python", "parquet", "json"},
    io_manager_key=STORE,
    metadata={
        "dagster/column_schema": _schema(
            STATE_COLUMNS,
            {
                "version": "int",
                "library_version": "int",
                "batch_version": "int",
                "n_cards": "int",
                "n_episodes": "int",
            },
        )
    },
)
def checkpoint_states(
    context: AssetExecutionContext,
    statepool: StatepoolSettings,
    run_episodes: pd.DataFrame,
    skill_snapshots: pd.DataFrame,
) -> Output[pd.DataFrame]:
    """What the curator saw at each checkpoint: snapshot k with the batch run under k-1 (else k).

    Also written as the original script's files, state_pool/<run>/<state_id>.json. Each
    state carries its reference ops, the diff to the run's next library. Analyses and
    receipts come from the run's sidecars when it has them.
    """
    settings = statepool.settings()
    run = context.partition_key
    run_path = _run_path(settings, run)
    fingerprint = _source_fingerprint(context, run_path)
    layout = StoreLayout(settings.store_dir)
    sidecars = read_sidecars(run_path, run, strict=settings.strict)
    update_rejects(layout, run, "sidecars", rejects_jsonl(sidecars.rejects, "sidecars"))
    joined, skipped = join_states(
        run,
        snapshots_from_table(skill_snapshots),
        batches_from_table(run_episodes),
        settings.dataset,
        pairing=settings.pairing,
        followup=settings.followup,
        analyses=sidecars.analyses,
        receipts=sidecars.receipts,
    )
    frame = states_table(joined)
    write_state_pool(layout, run, zip(frame["state_id"], frame["state"], strict=True))
    metadata = {
        **_common(frame, fingerprint),
        "states": len(frame),
        "pairing": settings.pairing,
        "followup": settings.followup,
        "skipped_checkpoints": len(skipped),
        "skipped": MetadataValue.json({str(s.version): s.reason for s in skipped}),
        "analyses": len(sidecars.analyses),
        "receipts": len(sidecars.receipts),
        "sidecar_rejects": len(sidecars.rejects),
        "ignored_sidecars": MetadataValue.json(sidecars.ignored),
        "preview": _preview(
            frame, ["state_id", "version", "batch_version", "n_cards", "n_episodes"]
        ),
    }
    if sidecars.rejects:
        metadata["sidecar_reject_details"] = MetadataValue.md(
            "\n".join(f"- {r.describe()}" for r in sidecars.rejects[:50])
        )
    return _output(frame, metadata, fingerprint)


@asset(
    partitions_def=runs_partitions,
    group_name=GROUP,
    kinds={"python", "parquet"},
    io_manager_key=STORE,
    metadata={
        "dagster/column_schema": _schema(PROMPT_COLUMNS, {"version": "int", "prompt_chars": "int"})
    },
)
def curator_prompts(
    context: AssetExecutionContext,
    statepool: StatepoolSettings,
    checkpoint_states: pd.DataFrame,
) -> Output[pd.DataFrame]:
    """The curator prompt of every state, rendered exactly as the inference side renders it."""
    settings = statepool.settings()
    run = context.partition_key
    fingerprint = _source_fingerprint(context, _run_path(settings, run))
    spec = settings.prompt_spec()
    states = states_from_table(checkpoint_states)
    frame = prompts_table(
        (state.state_id, run, int(version), build_curator_prompt(state, spec), ops)
        for state, version, ops in zip(
            states, checkpoint_states["version"], checkpoint_states["reference_ops"], strict=True
        )
    )
    lengths = frame["prompt_chars"].tolist()
    metadata = {
        **_common(frame, fingerprint),
        "prompts": len(frame),
        "prompt_chars_min": min(lengths, default=0),
        "prompt_chars_median": float(statistics.median(lengths)) if lengths else 0.0,
        "prompt_chars_max": max(lengths, default=0),
        "first_prompt": MetadataValue.md(
            f"```\n{frame['prompt'].iloc[0]}\n```" if lengths else "_no prompts_"
        ),
    }
    return _output(frame, metadata, fingerprint)


statepool_assets = [run_episodes, skill_snapshots, checkpoint_states, curator_prompts]
