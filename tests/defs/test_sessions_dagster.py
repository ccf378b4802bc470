"""Sessions in Dagster: the sensor on a real instance, the session step, its checks, sync."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, build_sensor_context

from statepool_dagster.core.names import (
    SESSION_PROMPTS,
    SESSION_STATES,
    SESSIONS_JOB,
    SESSIONS_PARTITIONS,
)
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.definitions import defs
from statepool_dagster.defs.sessions.sensors import sessions_sensor_def

from cli_helpers import cli_env
from instance_helpers import latest_metadata
from process_helpers import BIN


def _state(k: int, receipt: str = "r") -> dict:
    return {
        "state_id": f"gen-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": []},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}"}],
        "analysis": None,
        "last_receipt": receipt,
        "followup_qids": [],
        "gt_map": {},
    }


@pytest.fixture
def sessions(workspace, monkeypatch) -> Path:
    root = workspace.root / "sessions"
    monkeypatch.setenv("STATEPOOL_SESSIONS_DIR", str(root))
    return root


def _write(root: Path, session: str, writer: str, ks: range) -> None:
    with StateWriter(root, session, writer=writer) as w:
        for k in ks:
            w.append(_state(k, writer), policy_step=k)


def _tick(instance, cursor: str | None):
    with build_sensor_context(
        instance_ref=instance.get_ref(),
        definitions=defs(),
        resources=defs().resources,
        cursor=cursor,
    ) as context:
        return sessions_sensor_def().evaluate_tick(context)


def _materialize(instance, session: str):
    if session not in instance.get_dynamic_partitions(SESSIONS_PARTITIONS):
        instance.add_dynamic_partitions(SESSIONS_PARTITIONS, [session])
    return (
        defs()
        .resolve_job_def(SESSIONS_JOB)
        .execute_in_process(instance=instance, partition_key=session)
    )


def _check(instance, asset: str, name: str, session: str) -> bool:
    key = AssetCheckKey(AssetKey(asset), name)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    evaluation = record.event.dagster_event.event_specific_data
    assert evaluation.partition == session
    return evaluation.passed


def test_the_sensor_sees_only_new_segments(sessions, instance) -> None:
    _write(sessions, "s1", "a", range(3))
    _write(sessions, "s1", "b", range(3, 5))
    first = _tick(instance, None)
    assert [r.partition_key for r in first.run_requests] == ["s1"]
    assert first.dynamic_partitions_requests[0].partition_keys == ["s1"]
    assert _materialize(instance, "s1").success
    meta = latest_metadata(instance, SESSION_STATES, "s1")
    assert (meta["segments"], meta["segments_built_now"], meta["dagster/row_count"]) == (2, 2, 5)
    assert _check(instance, SESSION_STATES, "no_rejects", "s1")
    assert _check(instance, SESSION_PROMPTS, "every_state_has_prompt", "s1")

    quiet = _tick(instance, first.cursor)
    assert not quiet.run_requests and not quiet.dynamic_partitions_requests

    _write(sessions, "s1", "a", range(10, 12))
    grown = _tick(instance, quiet.cursor)
    assert [r.partition_key for r in grown.run_requests] == ["s1"]
    assert grown.run_requests[0].tags["statepool/new_segments"] == "1"
    assert grown.run_requests[0].run_key != first.run_requests[0].run_key
    assert json.loads(grown.cursor) == {"s1": {"a": [1, 2], "b": [0, 1]}}
    assert _materialize(instance, "s1").success
    meta = latest_metadata(instance, SESSION_STATES, "s1")
    assert (meta["segments"], meta["segments_built_now"], meta["dagster/row_count"]) == (3, 1, 7)
    # what the UI shows per session: states, writers, policy steps, rejects and a preview
    assert meta["writers"] == ["a", "b"] and meta["rejects"] == 0
    assert (meta["policy_step_min"], meta["policy_step_max"]) == (0, 11)
    assert "| a | a-000001.jsonl | 1 | 10 | True |" in meta["preview"]


def test_a_late_segment_below_the_cursor_is_requested(sessions, instance) -> None:
    _write(sessions, "s", "a", range(2))
    _write(sessions, "s", "a", range(2, 4))
    first = _tick(instance, None)
    late = sessions / "s" / "segments" / "a-000000.jsonl"
    data = late.read_bytes()
    late.unlink()
    quiet = _tick(instance, None)
    late.write_bytes(data)  # copied in late, from another machine
    again = _tick(instance, quiet.cursor)
    assert [r.partition_key for r in again.run_requests] == ["s"]
    assert first.run_requests[0].run_key != again.run_requests[0].run_key


def test_bad_lines_fail_the_no_rejects_check(sessions, instance) -> None:
    _write(sessions, "bad", "a", range(2))
    (sessions / "bad" / "segments" / "x-000000.jsonl").write_bytes(b"{oops\n")
    assert _materialize(instance, "bad").success
    assert not _check(instance, SESSION_STATES, "no_rejects", "bad")
    details = latest_metadata(instance, SESSION_STATES, "bad")["reject_details"]
    assert "bad/segments/x-000000.jsonl line 1: not valid JSON" in details


def test_sync_registers_and_builds_sessions(workspace, sessions, tmp_path: Path) -> None:
    _write(sessions, "s2", "w", range(4))
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(sessions)}
    done = subprocess.run(
        [str(BIN / "statepool"), "sync", "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["sessions"]
    assert rows == [{"session": "s2", "pending": 1, "ok": True, "error": ""}]
    again = subprocess.run(
        [str(BIN / "statepool"), "sync", "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(again.stdout)["sessions"] == []
    assert len(list((workspace.store / "session_prompts" / "s2").glob("*.parquet"))) == 1


def test_the_ui_counts_the_lines_an_ingest_rejected(workspace, sessions, instance, tmp_path):
    source = tmp_path / "states.jsonl"
    source.write_text(json.dumps(_state(1)) + "\n{broken\n[1]\n")
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(sessions)}
    done = subprocess.run(
        [str(BIN / "statepool"), "ingest", str(source), "--session", "ext"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "1 state into session ext" in done.stdout, done.stderr
    assert _materialize(instance, "ext").success
    meta = latest_metadata(instance, SESSION_STATES, "ext")
    assert meta["rejects"] == 2
    assert ".ingest.jsonl: 2 lines statepool ingest could not read" in meta["reject_details"]
    assert _check(instance, SESSION_STATES, "no_rejects", "ext") is False
