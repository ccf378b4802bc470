"""Asset checks, one result per run partition, shown beside each materialization in the UI."""

import functools
import json
import warnings

import pandas as pd
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    MetadataValue,
    PreviewWarning,
)
from dagster import asset_check as _asset_check

from .assets import checkpoint_states, curator_prompts, skill_snapshots
from .core.rejects import Reject
from .core.stages import PROMPTS, SNAPSHOTS, STATES
from .core.store import StoreLayout, read_parquet
from .partitions import runs_partitions
from .resources import StatepoolSettings


@functools.wraps(_asset_check)
def asset_check(**kwargs):
    """``@asset_check`` partitioned by runs: one result per run, without loading every run."""

    def decorate(fn):
        with warnings.catch_warnings():
            # Partitioned checks are "preview" in 1.13; they are what the UI needs per run.
            warnings.simplefilter("ignore", PreviewWarning)
            return _asset_check(partitions_def=runs_partitions, **kwargs)(fn)

    return decorate


def _table(
    context: AssetCheckExecutionContext,
    statepool: StatepoolSettings,
    asset: str,
    columns: list[str],
) -> pd.DataFrame:
    """Only the columns a check needs, straight from the store (never the whole table)."""
    layout = StoreLayout(statepool.settings().store_dir)
    return read_parquet(layout.table(asset, context.partition_key), columns=columns).to_pandas()


@asset_check(
    asset=checkpoint_states,
    description="No episode line, snapshot or sidecar file of the run was set aside as a reject.",
)
def no_rejects(
    context: AssetCheckExecutionContext, statepool: StatepoolSettings
) -> AssetCheckResult:
    path = StoreLayout(statepool.settings().store_dir).rejects(context.partition_key)
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    rejects = [Reject.model_validate(json.loads(line)) for line in lines if line.strip()]
    shown = [f"- {r.describe()}" for r in rejects[:20]]
    return AssetCheckResult(
        passed=not rejects,
        severity=AssetCheckSeverity.WARN,
        metadata={"rejects": len(rejects), "details": MetadataValue.md("\n".join(shown) or "none")},
    )


@asset_check(
    asset=checkpoint_states,
    description="Every snapshot was paired with an episode batch (skipped versions listed).",
)
def snapshots_paired(
    context: AssetCheckExecutionContext, statepool: StatepoolSettings
) -> AssetCheckResult:
    snapshots = _table(context, statepool, SNAPSHOTS, ["version"])
    states = _table(context, statepool, STATES, ["version"])
    skipped = sorted(set(snapshots["version"]) - set(states["version"]))
    return AssetCheckResult(
        passed=not skipped,
        severity=AssetCheckSeverity.WARN,
        metadata={"skipped_versions": MetadataValue.json([int(v) for v in skipped])},
    )


@asset_check(
    asset=skill_snapshots,
    description="The version inside each snapshot equals the one in its file name.",
)
def snapshot_versions_match(
    context: AssetCheckExecutionContext, statepool: StatepoolSettings
) -> AssetCheckResult:
    frame = _table(context, statepool, SNAPSHOTS, ["version", "declared_version", "file"])
    declared = frame["declared_version"]
    mismatched = frame[declared.isna() | (declared != frame["version"])]
    return AssetCheckResult(
        passed=mismatched.empty,
        severity=AssetCheckSeverity.WARN,
        metadata={"mismatched_files": MetadataValue.json(mismatched["file"].tolist())},
    )


@asset_check(
    asset=checkpoint_states,
    description="A run with snapshots has at least one checkpoint state.",
)
def states_exist(
    context: AssetCheckExecutionContext, statepool: StatepoolSettings
) -> AssetCheckResult:
    snapshots = _table(context, statepool, SNAPSHOTS, ["version"])
    states = _table(context, statepool, STATES, ["version"])
    return AssetCheckResult(
        passed=snapshots.empty or not states.empty,
        severity=AssetCheckSeverity.ERROR,
        metadata={"snapshots": len(snapshots), "states": len(states)},
    )


@asset_check(
    asset=curator_prompts,
    description="Every checkpoint state has a non-empty rendered prompt.",
)
def every_state_has_prompt(
    context: AssetCheckExecutionContext, statepool: StatepoolSettings
) -> AssetCheckResult:
    prompts = _table(context, statepool, PROMPTS, ["state_id", "prompt_chars"])
    states = _table(context, statepool, STATES, ["state_id"])
    prompted = set(prompts.loc[prompts["prompt_chars"] > 0, "state_id"])
    missing = sorted(set(states["state_id"]) - prompted)
    return AssetCheckResult(
        passed=not missing,
        severity=AssetCheckSeverity.ERROR,
        metadata={"missing": MetadataValue.json(missing)},
    )


statepool_checks = [
    no_rejects,
    snapshots_paired,
    snapshot_versions_match,
    states_exist,
    every_state_has_prompt,
]
