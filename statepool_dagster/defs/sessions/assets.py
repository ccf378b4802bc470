"""Sessions in Dagster: one ``sessions`` partition per session folder, its states and prompts.

One ``@multi_asset`` step per session partition builds the session's sealed segments not
built yet (``core/sessions/build.py``): one Parquet part per segment under
``session_states/<session>/`` and ``session_prompts/<session>/``, so a session grown by one
segment costs one segment's work. Its checks (no rejects, every state has a prompt) are
evaluated from the session's index after the build.
"""

import warnings
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    Output,
    PreviewWarning,
    multi_asset,
)

from ...core.names import GROUP, ROW_COUNT, SESSION_PROMPTS, SESSION_STATES
from ...core.sessions.build import SessionBuild, build_session
from ...core.sessions.layout import check_session_name
from ...core.sessions.store import SessionFolders
from ...core.store.atomic import read_parquet
from ...core.store.preview import markdown_preview
from ...core.words import plural
from ..resources import StatepoolSettings
from .partitions import sessions_partitions

NO_REJECTS = "no_rejects"
EVERY_STATE_HAS_A_PROMPT = "every_state_has_prompt"

# A tuple: the defs loader would take a module's list of specs for assets of their own.
SESSION_ASSET_SPECS = (
    AssetSpec(
        SESSION_STATES,
        description=(
            "States rollout workers wrote into the session (STATEPOOL_SESSIONS_DIR/<session>/"
            "segments/), one Parquet part per sealed segment: every copy with its provenance "
            "(writer, segment, line, policy step, parent state, time). A state's id is its "
            "run-path id (<run>_ckpt<k>) or a digest of its content. Bad lines are set aside "
            "in session_rejects/<session>/ naming segment and line."
        ),
        group_name=GROUP,
        kinds={"python", "parquet"},
    ),
    AssetSpec(
        SESSION_PROMPTS,
        description=(
            "The curator prompt of each session state, rendered by the run prompts' renderer "
            "and settings (byte-identical for the same state)."
        ),
        deps=[SESSION_STATES],
        group_name=GROUP,
        kinds={"python", "parquet"},
    ),
)
with warnings.catch_warnings():
    # Partitioned checks are "preview" in 1.13; they are what the UI needs per session.
    warnings.simplefilter("ignore", PreviewWarning)
    SESSION_CHECK_SPECS = [
        AssetCheckSpec(
            NO_REJECTS,
            asset=SESSION_STATES,
            description="No line of the session's segments was set aside, and every "
            "state's prompt rendered.",
            partitions_def=sessions_partitions,
        ),
        AssetCheckSpec(
            EVERY_STATE_HAS_A_PROMPT,
            asset=SESSION_PROMPTS,
            description="Each state of each segment has its prompt.",
            partitions_def=sessions_partitions,
        ),
    ]


def _preview(settings_store: str, session: str, build: SessionBuild) -> str:
    """The newest built segment's first states, or the session's first part."""
    folders = SessionFolders(settings_store, session)
    names = build.built or sorted(folders.load_index())[-1:]
    if not names:
        return "_no states yet_"
    path = folders.states / names[-1].replace(".jsonl", ".parquet")
    try:
        columns = ["state_id", "writer", "segment", "line", "policy_step", "first_copy"]
        table = read_parquet(path, columns=columns) if path.exists() else None
    except OSError:
        table = None
    return "_no states yet_" if table is None else markdown_preview(table, columns, 10)


def _metadata(build: SessionBuild, preview: str) -> dict[str, Any]:
    steps = build.policy_steps
    metadata: dict[str, Any] = {
        ROW_COUNT: build.unique,
        "segments": build.segments,
        "segments_built_now": len(build.built),
        "segments_dropped_now": len(build.dropped),
        "copies": build.states,
        "rejects": build.rejects,
        "writers": MetadataValue.json(build.writers),
        "policy_step_min": -1 if steps is None else steps[0],
        "policy_step_max": -1 if steps is None else steps[1],
        "core_seconds": round(build.seconds, 4),
        "preview": MetadataValue.md(preview),
    }
    if build.missing:
        metadata["session_folder"] = "missing on disk: the stored states are kept"
    if build.reject_details:
        lines = "\n".join(f"- {d}" for d in build.reject_details)
        metadata["reject_details"] = MetadataValue.md(lines)
    return metadata


@multi_asset(
    specs=SESSION_ASSET_SPECS,
    check_specs=SESSION_CHECK_SPECS,
    partitions_def=sessions_partitions,
)
def session_assets(
    context: AssetExecutionContext, statepool: StatepoolSettings
) -> Iterator[MaterializeResult | AssetCheckEvaluation | Output]:
    """Build the session's new sealed segments, then evaluate its checks."""
    settings = statepool.settings()
    session = check_session_name(context.partition_key)
    build = build_session(
        settings.sessions_dir, settings.store_dir, session, settings.prompt_spec()
    )
    context.log.info(
        f"{session}: built {plural(len(build.built), 'segment')} in {build.seconds:.3f}s; "
        f"{plural(build.unique, 'state')} from {plural(build.segments, 'segment')}"
    )
    metadata = _metadata(build, _preview(settings.store_dir, session, build))
    yield MaterializeResult(asset_key=SESSION_STATES, metadata=metadata)
    yield MaterializeResult(
        asset_key=SESSION_PROMPTS,
        metadata={ROW_COUNT: build.prompts, "segments": build.segments},
    )
    yield AssetCheckEvaluation(
        asset_key=AssetKey(SESSION_STATES),
        check_name=NO_REJECTS,
        partition=session,
        passed=build.rejects == 0,
        blocking=False,
        metadata={"rejects": build.rejects},
    )
    yield AssetCheckEvaluation(
        asset_key=AssetKey(SESSION_PROMPTS),
        check_name=EVERY_STATE_HAS_A_PROMPT,
        partition=session,
        passed=build.prompts == build.unique,
        blocking=False,
        metadata={"states": build.unique, "prompts": build.prompts},
    )
    for spec in SESSION_CHECK_SPECS:  # each check's output, which the evaluations stand for
        yield Output(None, context.assets_def.get_output_name_for_asset_check_key(spec.key))
