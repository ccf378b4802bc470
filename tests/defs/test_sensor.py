"""runs_sensor evaluated the way the daemon does: a persistent instance and evaluate_tick."""

from __future__ import annotations

import os
import time

import pytest
from dagster import build_sensor_context

from statepool_dagster.cli.sync import sync
from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.partitions import RUNS
from statepool_dagster.defs.runs.sensors import runs_sensor_def
from statepool_dagster.defs.tags import SOURCE_FINGERPRINT
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

runs_sensor = runs_sensor_def()  # at the default interval
SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)


@pytest.fixture(autouse=True)
def no_settle(monkeypatch):
    monkeypatch.setenv("STATEPOOL_SETTLE_SECONDS", "0")


def tick(instance):
    with build_sensor_context(
        instance_ref=instance.get_ref(), definitions=defs(), resources=defs().resources
    ) as context:
        return runs_sensor.evaluate_tick(context)


def added_keys(result) -> list[str]:
    return [k for r in result.dynamic_partitions_requests for k in r.partition_keys]


def age(path, seconds: float) -> None:
    """Make every file of a run look ``seconds`` old."""
    past = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (past, past))


def test_new_runs_are_registered_and_requested_in_one_result(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    result = tick(instance)
    assert added_keys(result) == ["run000", "run001"]
    assert [r.partition_key for r in result.run_requests] == ["run000", "run001"]
    for request in result.run_requests:
        fingerprint = request.tags[SOURCE_FINGERPRINT]
        assert request.run_key == f"{request.partition_key}:{fingerprint}"


def test_sensor_targets_the_job_and_is_on_by_default():
    from dagster import DefaultSensorStatus

    assert runs_sensor.job_name == "statepool_job"
    assert runs_sensor.default_status == DefaultSensorStatus.RUNNING
    assert runs_sensor.minimum_interval_seconds == 30


def test_tick_right_after_sync_requests_nothing(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    summary = sync(instance)
    assert not summary.failed
    result = tick(instance)
    assert result.run_requests == []
    assert added_keys(result) == []
    assert "0 new runs, 0 changed, 2 unchanged" in result.skip_message


def test_changed_run_is_requested_with_a_new_run_key(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    sync(instance)
    append_checkpoint(workspace.run("run001"), SPEC, 1)
    result = tick(instance)
    assert [r.partition_key for r in result.run_requests] == ["run001"]
    assert added_keys(result) == []


def test_run_still_being_written_waits_until_it_settles(workspace, instance, monkeypatch):
    monkeypatch.setenv("STATEPOOL_SETTLE_SECONDS", "60")
    generate_runs(workspace.runs, SPEC)
    age(workspace.run("run000"), 120)
    result = tick(instance)
    assert [r.partition_key for r in result.run_requests] == ["run000"]
    # The fresh run is registered now, requested once its files are old enough.
    assert added_keys(result) == ["run000", "run001"]
    instance.add_dynamic_partitions(RUNS, added_keys(result))
    age(workspace.run("run001"), 120)
    later = tick(instance)
    assert [r.partition_key for r in later.run_requests] == ["run000", "run001"]


def test_invalid_folder_names_are_never_registered(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    (workspace.runs / "run000").rename(workspace.runs / "bad name")
    (workspace.runs / "c,d").mkdir()
    (workspace.runs / "c,d" / "episodes.jsonl").write_text("{}\n")
    result = tick(instance)
    assert added_keys(result) == ["run001"]
    assert [r.partition_key for r in result.run_requests] == ["run001"]


def test_invalid_folder_names_are_named_in_the_tick(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    sync(instance)
    (workspace.runs / "bad name").mkdir()
    (workspace.runs / "bad name" / "episodes.jsonl").write_text("{}\n")
    result = tick(instance)
    assert result.run_requests == []
    assert "1 invalid name: `bad name`" in result.skip_message


def test_hidden_folders_and_plain_files_are_ignored(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    (workspace.runs / "run000").rename(workspace.runs / ".trash")
    (workspace.runs / "notes.txt").write_text("not a run")
    (workspace.runs / "empty").mkdir()
    result = tick(instance)
    assert added_keys(result) == ["run001"]


def test_run_key_changes_exactly_when_the_files_change(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    first = tick(instance)
    keys = {r.partition_key: r.run_key for r in first.run_requests}
    append_checkpoint(workspace.run("run000"), SPEC, 0)
    instance.add_dynamic_partitions(RUNS, added_keys(first))
    second = tick(instance)
    again = {r.partition_key: r.run_key for r in second.run_requests}
    assert again["run001"] == keys["run001"]  # same files: the daemon dedupes this key
    assert again["run000"] != keys["run000"]  # changed files: a new key, so a new run
