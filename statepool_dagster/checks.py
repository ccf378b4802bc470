"""Asset checks, one result per run partition, shown beside each materialization in the UI."""

import functools
import json
import warnings

import pandas as pd
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetIn,
    MetadataValue,
    PreviewWarning,
)
from dagster import asset_check as _asset_check

from .assets import checkpoint_states, curator_prompts, skill_snapshots
from .core.rejects import Reject
from .core.store import StoreLayout
from .partitions import runs_partitions
from .resources import StatepoolSettings

SNAPSHOTS_IN = {"skill_snapshots": AssetIn("skill_snapshots")}


@functools.wraps(_asset_check)
def asset_check(**kwargs):
    """``@asset_check`` partitioned by runs: one result per run, without loading every run."""

    def decorate(fn):
        with warnings.catch_warnings():
            # Partitioned checks are "preview" in 1.13; they are what the UI needs per run.
            warnings.simplefilter("ignore", PreviewWarning)
            return _asset_check(partitions_def=runs_partitions, **kwargs)(fn)

    return decorate


@asset_check(
    asset=checkpoint_states,
    description="No episode line or snapshot file of the run was set aside as a reject.",
)
def no_rejects(
    context: AssetCheckExecutionContext,
    statepool: StatepoolSettings,
    checkpoint_states: pd.DataFrame,
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
    additional_ins=SNAPSHOTS_IN,
    description="Every snapshot was paired with an episode batch (skipped versions listed).",
)
def snapshots_paired(
    checkpoint_states: pd.DataFrame, skill_snapshots: pd.DataFrame
) -> AssetCheckResult:
    skipped = sorted(set(skill_snapshots["version"]) - set(checkpoint_states["version"]))
    return AssetCheckResult(
        passed=not skipped,
        severity=AssetCheckSeverity.WARN,
        metadata={"skipped_versions": MetadataValue.json([int(v) for v in skipped])},
    )


@asset_check(
    asset=skill_snapshots,
    description="The version inside each snapshot equals the one in its file name.",
)
def snapshot_versions_match(skill_snapshots: pd.DataFrame) -> AssetCheckResult:
    declared = skill_snapshots["declared_version"]
    mismatched = skill_snapshots[declared.isna() | (declared != skill_snapshots["version"])]
    return AssetCheckResult(
        passed=mismatched.empty,
        severity=AssetCheckSeverity.WARN,
        metadata={"mismatched_files": MetadataValue.json(mismatched["file"].tolist())},
    )


@asset_check(
    asset=checkpoint_states,
    additional_ins=SNAPSHOTS_IN,
    description="A run with snapshots has at least one checkpoint state.",
)
def states_exist(
    checkpoint_states: pd.DataFrame, skill_snapshots: pd.DataFrame
) -> AssetCheckResult:
    return AssetCheckResult(
        passed=skill_snapshots.empty or not checkpoint_states.empty,
        severity=AssetCheckSeverity.ERROR,
        metadata={"snapshots": len(skill_snapshots), "states": len(checkpoint_states)},
    )


@asset_check(
    asset=curator_prompts,
    additional_ins={"checkpoint_states": AssetIn("checkpoint_states")},
    description="Every checkpoint state has a non-empty rendered prompt.",
)
def every_state_has_prompt(
    curator_prompts: pd.DataFrame, checkpoint_states: pd.DataFrame
) -> AssetCheckResult:
    prompted = set(curator_prompts.loc[curator_prompts["prompt_chars"] > 0, "state_id"])
    missing = sorted(set(checkpoint_states["state_id"]) - prompted)
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
