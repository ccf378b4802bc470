"""Messy runs: nothing lost, every problem named, the good states still equal the original's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import AssetCheckSeverity

from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.partitions import RUNS

from broken_runs import build_corpus, cleaned_copy
from cli_helpers import cli_env
from store_helpers import seed_pool, store_pool

STATEPOOL = Path(sys.executable).with_name("statepool")


@pytest.fixture
def corpus(workspace):
    return build_corpus(workspace.runs, workspace.root / "outside")


def sync_cli(workspace, tmp_path, **env_extra) -> subprocess.CompletedProcess:
    env = cli_env(workspace, tmp_path / "home")
    env.update(env_extra)
    return subprocess.run(
        [str(STATEPOOL), "sync", "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def lenient(tmp_path_factory) -> SimpleNamespace:
    """The corpus synced once by a plain (lenient) ``statepool sync --json``: the corpus, the
    store and the sync's report, read (never written) by the tests of what that sync does."""
    root = tmp_path_factory.mktemp("lenient")
    where = SimpleNamespace(runs=root / "runs", store=root / "store")
    corpus = build_corpus(where.runs, root / "outside")
    done = sync_cli(where, root)
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(corpus=corpus, store=where.store, report=json.loads(done.stdout))


def read_rejects(store: Path, run: str) -> list[dict]:
    path = store / "rejects" / f"{run}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_lenient_sync_exits_zero_and_lists_rejects_per_run(lenient):
    report = lenient.report
    rejects = {r["run"]: r["rejects"] for r in report["runs"]}
    assert rejects["bad_lines"] == 5
    assert rejects["bad_snapshots"] == 2
    assert rejects["unreadable"] == 1
    assert rejects["good"] == 0
    assert report["failed"] == 0
    assert report["invalid"] == {"bad name": "characters outside [A-Za-z0-9._-]: ' '"}


def test_every_rejected_line_is_kept_with_its_number_and_raw_text(lenient):
    rejects = read_rejects(lenient.store, "bad_lines")
    expected = lenient.corpus.bad_lines["bad_lines"]
    assert sorted(r["line"] for r in rejects) == sorted(expected)
    for reject in rejects:
        assert reject["file"] == "bad_lines/episodes.jsonl"
        assert expected[reject["line"]] in reject["error"]
    raws = {r["line"]: r["raw"] for r in rejects}
    assert raws[10] == '{"id": "caf\\xe9", "skill_lib_version": 0}'  # the byte is escaped, kept
    assert raws[max(expected)] == '{"id": "half", "skill_lib_ver'


def test_bad_snapshot_files_are_rejects_and_stray_names_are_ignored(lenient):
    rejects = read_rejects(lenient.store, "bad_snapshots")
    expected = set(lenient.corpus.bad_snapshots["bad_snapshots"])
    assert {Path(r["file"]).name for r in rejects} == expected
    assert all(r["line"] is None for r in rejects)
    states = {p.name for p in (lenient.store / "state_pool" / "bad_snapshots").iterdir()}
    assert states == {"bad_snapshots_ckpt0.json", "bad_snapshots_ckpt3.json"}


def test_good_states_equal_the_original_on_the_cleaned_data(lenient, tmp_path, seed):
    clean = cleaned_copy(lenient.corpus, tmp_path / "clean")
    expected = seed_pool(seed, clean, tmp_path / "seed_out")
    ours = store_pool(lenient.store)
    for run, files in expected.items():
        assert ours[run] == files, run
    assert ours["no_snapshots"] == {} == expected["no_snapshots"]


def test_strict_sync_fails_naming_file_and_line_after_trying_every_run(corpus, workspace, tmp_path):
    done = sync_cli(workspace, tmp_path, STATEPOOL_ON_BAD_RECORD="fail")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    errors = {r["run"]: r["error"] for r in report["runs"] if not r["success"]}
    assert set(errors) == {"bad_lines", "bad_snapshots", "unreadable"}
    assert errors["bad_lines"].startswith("bad_lines/episodes.jsonl line 5: not valid JSON")
    assert "bad_snapshots/snapshots/skills_v1.json" in errors["bad_snapshots"]
    assert (workspace.store / "state_pool" / "good").is_dir()


def test_run_folder_notes_name_what_is_missing(corpus, workspace, instance):
    from dagster import AssetKey, AssetRecordsFilter

    job = defs().resolve_job_def("statepool_job")
    for run in ("no_episodes", "no_snapshots", "empty_episodes", "linked"):
        instance.add_dynamic_partitions(RUNS, [run])
        assert job.execute_in_process(instance=instance, partition_key=run).success

    def notes(asset: str, run: str) -> str:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[run]), limit=1
        ).records
        return records[0].asset_materialization.metadata["notes"].value

    assert "no episodes.jsonl" in notes("run_episodes", "no_episodes")
    assert "no snapshots/ folder" in notes("skill_snapshots", "no_snapshots")
    assert "episodes.jsonl is empty" in notes("run_episodes", "empty_episodes")
    assert "symlink" in notes("run_episodes", "linked")


def check_results(result) -> dict[str, tuple[bool, AssetCheckSeverity]]:
    return {e.check_name: (e.passed, e.severity) for e in result.get_asset_check_evaluations()}


def check_descriptions(result) -> dict[str, str]:
    """What each check's result says failed (or that nothing did)."""
    return {e.check_name: e.description for e in result.get_asset_check_evaluations()}


def test_asset_checks_pass_on_a_good_run(corpus, workspace, instance):
    instance.add_dynamic_partitions(RUNS, ["good"])
    result = (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key="good")
    )
    checks = check_results(result)
    assert set(checks) == {"inputs_clean", "states_complete"}
    assert all(passed for passed, _ in checks.values())


def test_asset_checks_warn_on_rejects_and_unpaired_snapshots(corpus, workspace, instance):
    instance.add_dynamic_partitions(RUNS, ["bad_lines", "no_episodes"])
    job = defs().resolve_job_def("statepool_job")
    bad_lines = job.execute_in_process(instance=instance, partition_key="bad_lines")
    assert check_results(bad_lines)["inputs_clean"] == (False, AssetCheckSeverity.WARN)
    assert check_descriptions(bad_lines)["inputs_clean"].endswith("rejects set aside")
    no_episodes = job.execute_in_process(instance=instance, partition_key="no_episodes")
    assert check_results(no_episodes) == {
        "inputs_clean": (False, AssetCheckSeverity.WARN),
        "states_complete": (False, AssetCheckSeverity.ERROR),
    }
    said = check_descriptions(no_episodes)
    assert said["inputs_clean"].endswith("without an episode batch (skipped)")
    assert said["states_complete"].startswith("no states from")


def test_snapshot_version_mismatch_is_a_warning(workspace, instance):
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

    run = generate_run(workspace.runs / "renamed", SampleSpec(n_checkpoints=3, emb_dim=2), 0)
    (run / "snapshots" / "skills_v2.json").rename(run / "snapshots" / "skills_v7.json")
    instance.add_dynamic_partitions(RUNS, ["renamed"])
    result = (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key="renamed")
    )
    assert check_results(result)["inputs_clean"] == (False, AssetCheckSeverity.WARN)
    said = check_descriptions(result)["inputs_clean"]
    assert "1 snapshot whose version differs from its file name's" in said


def test_sensor_tick_survives_unreadable_entries(workspace, instance, monkeypatch):
    from dagster import build_sensor_context

    from statepool_dagster.defs.runs.sensors import runs_sensor_def
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

    monkeypatch.setenv("STATEPOOL_SETTLE_SECONDS", "0")
    run = generate_run(workspace.runs / "loopy", SampleSpec(n_checkpoints=2, emb_dim=2), 0)
    (run / "analyses").symlink_to(run / "analyses")  # a symlink loop inside a run
    (workspace.runs / "dangling").symlink_to(workspace.root / "nowhere")
    with build_sensor_context(
        instance_ref=instance.get_ref(), definitions=defs(), resources=defs().resources
    ) as context:
        result = runs_sensor_def().evaluate_tick(context)
    assert [r.partition_key for r in result.run_requests] == ["loopy"]


def test_one_check_runs_alone_without_materializing(corpus, workspace, instance):
    from dagster import AssetCheckKey, AssetKey, AssetSelection, Definitions, define_asset_job

    instance.add_dynamic_partitions(RUNS, ["bad_lines"])
    assert (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key="bad_lines")
        .success
    )
    key = AssetCheckKey(AssetKey("checkpoint_states"), "inputs_clean")
    only = define_asset_job("only_inputs_clean", selection=AssetSelection.checks(key))
    merged = Definitions.merge(defs(), Definitions(jobs=[only]))
    result = merged.resolve_job_def("only_inputs_clean").execute_in_process(
        instance=instance, tags={"dagster/partition": "bad_lines"}
    )
    assert check_results(result) == {"inputs_clean": (False, AssetCheckSeverity.WARN)}
    assert result.get_asset_materialization_events() == []
