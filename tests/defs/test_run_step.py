"""One step per run: the four run assets and their checks in one subsettable multi_asset.

The real Definitions in a real instance: a run over one partition or many is one step,
records each partition's materializations and check results, and can be subset.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetSelection,
    DagsterEventType,
    Definitions,
    define_asset_job,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from statepool_dagster.cli.sync import sync
from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.partitions import RUNS
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from instance_helpers import latest_metadata, materialize_run, new_instance

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
NAMES = [f"run{i:03d}" for i in range(SPEC.n_runs)]
ASSETS = ("run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts")
INPUTS_CLEAN = AssetCheckKey(AssetKey("checkpoint_states"), "inputs_clean")
CHECKS = {INPUTS_CLEAN, AssetCheckKey(AssetKey("curator_prompts"), "states_complete")}


def run_range(instance, first: str, last: str, job_name: str = "statepool_job", jobs=()):
    """One Dagster run over the partitions first..last, as a single-run backfill makes it."""
    merged = Definitions.merge(defs(), Definitions(jobs=list(jobs))) if jobs else defs()
    return merged.resolve_job_def(job_name).execute_in_process(
        instance=instance,
        tags={ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last},
        raise_on_error=False,
    )


def steps(result) -> list[str]:
    return [e.step_key for e in result.all_events if e.event_type == DagsterEventType.STEP_START]


def check_statuses(instance, keys=CHECKS) -> dict[tuple[AssetCheckKey, str], str]:
    """The latest recorded result of every check on every partition: SUCCEEDED, FAILED..."""
    latest: dict[tuple[AssetCheckKey, str], str] = {}
    for key in keys:
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=100):
            latest.setdefault((key, record.partition), record.status.value)
    return latest


def materialized(result) -> set[tuple[str, str]]:
    return {
        (m.asset_key.to_user_string(), m.partition)
        for m in (
            e.step_materialization_data.materialization
            for e in result.all_events
            if (e.event_type == DagsterEventType.ASSET_MATERIALIZATION)
        )
    }


@pytest.fixture
def registered(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    instance.add_dynamic_partitions(RUNS, NAMES)
    return instance


@pytest.fixture(scope="module")
def ranged(tmp_path_factory):
    """The sample runs built by one run over all their partitions: its instance (open) and
    result, read (never written) by the tests of what that run did."""
    root = tmp_path_factory.mktemp("ranged")
    generate_runs(root / "runs", SPEC)
    with new_instance(root / "home") as instance, pytest.MonkeyPatch.context() as env:
        env.setenv("STATEPOOL_RUNS_DIR", str(root / "runs"))
        env.setenv("STATEPOOL_STORE_DIR", str(root / "store"))
        instance.add_dynamic_partitions(RUNS, NAMES)
        result = run_range(instance, NAMES[0], NAMES[-1])
        yield SimpleNamespace(instance=instance, result=result)


def test_a_partition_run_is_one_step(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    result = materialize_run(instance, "run000")
    assert result.success
    assert steps(result) == ["run_assets"]
    assert materialized(result) == {(asset, "run000") for asset in ASSETS}


def test_a_run_over_several_partitions_is_one_step_recording_each(ranged):
    result = ranged.result
    assert result.success
    assert steps(result) == ["run_assets"]
    assert materialized(result) == {(asset, run) for asset in ASSETS for run in NAMES}
    for run in NAMES:
        metadata = latest_metadata(ranged.instance, "checkpoint_states", run)
        assert metadata["states"] == SPEC.n_checkpoints
        assert f"{run}_ckpt0" in metadata["preview"]


def test_a_run_over_several_partitions_records_every_check_for_each(ranged):
    evaluations = {
        (e.asset_check_key, e.partition) for e in ranged.result.get_asset_check_evaluations()
    }
    assert evaluations == {(key, run) for key in CHECKS for run in NAMES}
    assert check_statuses(ranged.instance) == {
        (key, run): "SUCCEEDED" for key in CHECKS for run in NAMES
    }


def test_sync_batches_record_every_check_for_each_run(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    summary = sync(instance)
    assert not summary.failed
    [run] = instance.get_runs()  # one batch over the three partitions
    assert run.tags[ASSET_PARTITION_RANGE_START_TAG] == NAMES[0]
    assert check_statuses(instance) == {(key, r): "SUCCEEDED" for key in CHECKS for r in NAMES}


def test_a_check_failing_on_one_run_is_recorded_for_that_run_alone(registered, workspace):
    (workspace.run("run001") / "episodes.jsonl").open("a").write("not json\n")
    assert run_range(registered, NAMES[0], NAMES[-1]).success
    statuses = check_statuses(registered)
    assert [statuses[(INPUTS_CLEAN, run)] for run in NAMES] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]


def test_a_failed_run_does_not_hide_the_others(registered, workspace, monkeypatch):
    monkeypatch.setenv("STATEPOOL_ON_BAD_RECORD", "fail")
    (workspace.run("run001") / "episodes.jsonl").open("a").write("not json\n")
    result = run_range(registered, NAMES[0], NAMES[-1])
    assert not result.success
    good = ["run000", "run002"]
    assert materialized(result) == {(asset, run) for asset in ASSETS for run in good}
    evaluations = {(e.asset_check_key, e.partition) for e in result.get_asset_check_evaluations()}
    assert evaluations == {(key, run) for key in CHECKS for run in good}
    [failure] = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    while error.cause is not None:
        error = error.cause
    assert "run001/episodes.jsonl line" in error.message


def test_a_failed_run_keeps_the_assets_it_built_before_failing(registered, workspace, monkeypatch):
    monkeypatch.setenv("STATEPOOL_ON_BAD_RECORD", "fail")
    (workspace.run("run001") / "snapshots" / "skills_v1.json").write_text("{", encoding="utf-8")
    result = run_range(registered, NAMES[0], NAMES[-1])
    assert not result.success
    recorded = materialized(result)
    assert ("run_episodes", "run001") in recorded
    assert {(a, "run001") for a in ASSETS[1:]}.isdisjoint(recorded)
    assert {(a, r) for a in ASSETS for r in ("run000", "run002")} <= recorded


def test_sync_retries_only_the_failed_run_of_a_batch(workspace, instance, monkeypatch):
    generate_runs(workspace.runs, SPEC)
    monkeypatch.setenv("STATEPOOL_ON_BAD_RECORD", "fail")
    (workspace.run("run001") / "episodes.jsonl").open("a").write("not json\n")
    summary = sync(instance)
    assert [(o.run, o.success) for o in summary.outcomes] == [
        ("run000", True),
        ("run001", False),
        ("run002", True),
    ]
    assert "run001/episodes.jsonl line" in summary.failed[0].error
    assert summary.states_written == 2 * SPEC.n_checkpoints
    assert len(instance.get_runs()) == 2  # the batch, then run001 alone


def subset_job(name: str, *assets: str):
    return define_asset_job(name, selection=AssetSelection.assets(*assets))


def test_materializing_only_the_prompts_rebuilds_them_alone(registered):
    assert run_range(registered, NAMES[0], NAMES[-1]).success
    job = subset_job("only_prompts", "curator_prompts")
    result = run_range(registered, NAMES[0], NAMES[1], "only_prompts", [job])
    assert result.success
    assert steps(result) == ["run_assets"]
    assert materialized(result) == {("curator_prompts", run) for run in NAMES[:2]}
    checks = {(e.check_name, e.partition) for e in result.get_asset_check_evaluations()}
    assert checks == {("states_complete", run) for run in NAMES[:2]}


def test_materializing_only_the_first_two_assets_builds_nothing_after_them(registered, workspace):
    job = subset_job("inputs_only", "run_episodes", "skill_snapshots")
    result = run_range(registered, NAMES[0], NAMES[-1], "inputs_only", [job])
    assert result.success
    assert materialized(result) == {
        (asset, run) for asset in ("run_episodes", "skill_snapshots") for run in NAMES
    }
    checks = {(e.check_name, e.partition) for e in result.get_asset_check_evaluations()}
    assert checks == set()  # both checks read the states: they hang on the later assets
    assert not (workspace.store / "checkpoint_states").exists()
    assert not (workspace.store / "state_pool").exists()


def test_the_settings_resource_reaches_the_assets_checks_and_io_manager(registered, tmp_path):
    other = tmp_path / "other_store"
    config = {"resources": {"statepool": {"config": {"store_dir": str(other)}}}}
    result = (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=registered, partition_key="run000", run_config=config)
    )
    assert result.success
    assert (other / "curator_prompts" / "run000").is_dir()
    assert all(e.passed for e in result.get_asset_check_evaluations())


def test_the_code_location_runs_and_loads_without_deprecation_warnings(registered):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert materialize_run(registered, "run000").success
        frame = defs().load_asset_value(
            "curator_prompts", partition_key="run000", instance=registered
        )
    assert len(frame) == SPEC.n_checkpoints
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations == [], [str(w.message) for w in deprecations]


# The five checks the run assets had before they became two; an instance keeps their results.
REMOVED_CHECKS = [
    ("checkpoint_states", "no_rejects"),
    ("checkpoint_states", "snapshots_paired"),
    ("checkpoint_states", "states_exist"),
    ("skill_snapshots", "snapshot_versions_match"),
    ("curator_prompts", "every_state_has_prompt"),
]


def test_results_of_removed_checks_stay_in_history_and_harm_nothing(workspace, instance):
    from dagster import AssetCheckEvaluation

    from statepool_dagster.cli.status import run_statuses
    from statepool_dagster.core.config import Settings

    generate_runs(workspace.runs, SPEC)
    instance.add_dynamic_partitions(RUNS, NAMES)
    removed = [AssetCheckKey(AssetKey(asset), name) for asset, name in REMOVED_CHECKS]
    for key in removed:
        instance.report_runless_asset_event(
            AssetCheckEvaluation(
                asset_key=key.asset_key, check_name=key.name, partition=NAMES[0], passed=False
            )
        )
    assert not sync(instance).failed
    assert check_statuses(instance, [*removed, *CHECKS]) == {
        **{(key, NAMES[0]): "FAILED" for key in removed},
        **{(key, run): "SUCCEEDED" for key in CHECKS for run in NAMES},
    }
    statuses = run_statuses(instance, Settings.from_env())
    assert {(s["run"], s["status"]) for s in statuses} == {(run, "materialized") for run in NAMES}
