"""An idle ``statepool sync`` answered from the instance's kept answers, without Dagster: the
same report as a sync that opens Dagster, and never when anything is to build or the instance
changed since it answered."""

from __future__ import annotations

import json
import time
from pathlib import Path

from statepool_dagster.cli.idle import RECEIPT
from statepool_dagster.core.feedback.recorder import FeedbackRecorder
from statepool_dagster.core.feedback.records import from_breakdown
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env, statepool

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=3, emb_dim=2, episodes_per_batch=1)
SKIPPED = "Dagster not opened"


def _sync(env, cwd, *flags: str):
    done = statepool(env, cwd, "sync", "--json", "-v", *flags)
    return json.loads(done.stdout), SKIPPED in done.stderr


def _kept(workspace, tmp_path) -> dict:
    """Two runs built, then an idle sync that keeps the instance's answers."""
    generate_runs(workspace.runs, SPEC)
    env = cli_env(workspace, tmp_path / "home")
    built, _ = _sync(env, tmp_path)
    assert built["new"] == 2
    time.sleep(1.1)  # the instance's files settle
    _, skipped = _sync(env, tmp_path)
    assert not skipped and (tmp_path / "home" / RECEIPT).is_file()
    return env


def test_an_idle_sync_says_what_one_opening_dagster_says(workspace, tmp_path):
    env = _kept(workspace, tmp_path)
    fast, skipped = _sync(env, tmp_path)
    assert skipped
    (tmp_path / "home" / RECEIPT).unlink()
    slow, skipped = _sync(env, tmp_path)
    assert not skipped
    assert fast == slow and (fast["unchanged"], fast["runs"]) == (2, [])
    text = statepool(env, tmp_path, "sync").stdout
    assert text == statepool(env, tmp_path, "sync").stdout  # kept again by the one before


def test_a_changed_run_is_built_whatever_was_kept(workspace, tmp_path):
    env = _kept(workspace, tmp_path)
    episodes = workspace.runs / "run001" / "episodes.jsonl"
    episodes.write_text(episodes.read_text() + episodes.read_text().splitlines()[-1] + "\n")
    report, skipped = _sync(env, tmp_path)
    assert not skipped and report["changed"] == 1 and report["runs"][0]["success"]


def test_an_instance_changed_since_it_answered_is_asked_again(workspace, tmp_path):
    """A wipe in the UI (here: Dagster's API) forgets what the runs were built from: the next
    sync builds them again, as one opening Dagster would."""
    from dagster import AssetKey, DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    from statepool_dagster.core.names import FINAL_ASSET

    env = _kept(workspace, tmp_path)
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path / "home"))) as instance:
        instance.wipe_assets([AssetKey(FINAL_ASSET)])
    report, skipped = _sync(env, tmp_path)
    assert not skipped
    assert [r["run"] for r in report["runs"]] == ["run000", "run001"]


def test_new_feedback_or_session_segments_open_dagster(workspace, tmp_path):
    env = _kept(workspace, tmp_path)
    recorder = FeedbackRecorder(str(workspace.store / "feedback"))
    recorder.record(
        [from_breakdown("run000_ckpt1", {"score": 1.0}, group="g", time=time.time(), source="trl")]
    )
    recorder.close()
    report, skipped = _sync(env, tmp_path)
    assert not skipped and report["feedback"]["ran"] and report["feedback"]["records"] == 1


def test_another_instance_config_is_always_asked(workspace, tmp_path):
    home = tmp_path / "home"
    generate_runs(workspace.runs, SPEC)
    env = cli_env(workspace, home)
    config = home / "dagster.yaml"
    config.write_text(config.read_text() + "\nrun_monitoring:\n  enabled: false\n")
    _sync(env, tmp_path)
    time.sleep(1.1)
    for _ in range(2):
        _, skipped = _sync(env, tmp_path)
        assert not skipped
    assert not (home / RECEIPT).exists()


def test_other_settings_are_not_answered_from_the_kept_ones(workspace, tmp_path):
    env = _kept(workspace, tmp_path)
    other = Path(tmp_path / "other_runs")
    generate_runs(other, SampleSpec(n_runs=1, n_checkpoints=2, n_cards=2, emb_dim=2))
    report, skipped = _sync({**env, "STATEPOOL_RUNS_DIR": str(other)}, tmp_path)
    assert not skipped and report["seen"] == 1
