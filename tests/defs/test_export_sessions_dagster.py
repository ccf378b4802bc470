"""training_dataset with sessions on a real instance, its automation, and the daemon's 90 s."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, AssetSelection, evaluate_automation_conditions

from statepool_dagster.cli.sync import sync
from statepool_dagster.core.export.rows import ExportOptions, split_of
from statepool_dagster.core.names import SESSIONS_JOB, SESSIONS_PARTITIONS
from statepool_dagster.core.scales import STD_TOP
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.definitions import defs
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env
from instance_helpers import latest_metadata
from process_helpers import daemon, wait_until
from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=2, n_cards=4, emb_dim=4)
DATASET = AssetKey("training_dataset")


def _in_train(prefix: str) -> str:
    """A session name the default split (val 10 %, seed 0) puts in train."""
    options = ExportOptions()
    return next(f"{prefix}{i}" for i in range(100) if split_of(f"{prefix}{i}", options) == "train")


@pytest.fixture
def sessions(workspace, monkeypatch) -> Path:
    root = workspace.root / "sessions"
    monkeypatch.setenv("STATEPOOL_SESSIONS_DIR", str(root))
    return root


def _write(root: Path, session: str, ks: range) -> None:
    with StateWriter(root, session, writer="w") as writer:
        for k in ks:
            writer.append(generated_state(k), policy_step=k)


def _materialize_session(instance, session: str) -> None:
    if session not in instance.get_dynamic_partitions(SESSIONS_PARTITIONS):
        instance.add_dynamic_partitions(SESSIONS_PARTITIONS, [session])
    job = defs().resolve_job_def(SESSIONS_JOB)
    assert job.execute_in_process(instance=instance, partition_key=session).success


def _evaluate(instance, previous=None):
    return evaluate_automation_conditions(
        defs=defs(),
        instance=instance,
        asset_selection=AssetSelection.assets("training_dataset"),
        cursor=None if previous is None else previous.cursor,
    )


def _train_rows(store: Path, fmt: str) -> list[dict]:
    return pq.read_table(store / "exports" / fmt / "train.parquet").to_pylist()


def test_training_dataset_holds_session_states_and_follows_new_segments(
    workspace, sessions, instance
):
    generate_runs(workspace.runs, SPEC)
    assert not sync(instance).failed
    session = _in_train("grpo-")
    _write(sessions, session, range(3))
    start = _evaluate(instance)
    _materialize_session(instance, session)
    after_session = _evaluate(instance, start)
    assert after_session.get_num_requested(DATASET) == 1  # a session's build counts
    job = defs().resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(instance=instance, asset_selection=[DATASET]).success
    rows = _train_rows(workspace.store, "verl")
    from_session = [r["extra_info"] for r in rows if r["extra_info"]["source"] == "sessions"]
    assert sorted(i["policy_step"] for i in from_session) == [0, 1, 2]
    assert {i["session"] for i in from_session} == {session}
    metadata = latest_metadata(instance, "training_dataset")
    assert metadata["sessions_by_split"]["train"] == [session]
    assert metadata["dagster/row_count"] == SPEC.n_runs * SPEC.n_checkpoints + 3
    quiet = _evaluate(instance, after_session)
    assert quiet.get_num_requested(DATASET) == 0
    _write(sessions, session, range(3, 5))
    _materialize_session(instance, session)
    assert _evaluate(instance, quiet).get_num_requested(DATASET) == 1


def test_training_dataset_reads_the_selection_and_freshness_settings(
    workspace, sessions, instance, monkeypatch
):
    generate_runs(workspace.runs, SPEC)
    assert not sync(instance).failed
    session = _in_train("fresh-")
    _write(sessions, session, range(5))
    _materialize_session(instance, session)
    monkeypatch.setenv("STATEPOOL_EXPORT_SOURCES", "sessions")
    monkeypatch.setenv("STATEPOOL_EXPORT_MAX_STALENESS", "1")
    monkeypatch.setenv("STATEPOOL_SELECT_WEIGHT", "std")
    job = defs().resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(instance=instance, asset_selection=[DATASET]).success
    rows = _train_rows(workspace.store, "trl")
    assert sorted(r["policy_step"] for r in rows) == [3, 4]
    assert {r["source"] for r in rows} == {"sessions"} and {r["weight"] for r in rows} == {STD_TOP}
    details = latest_metadata(instance, "training_dataset")["problem_details"]
    assert "older than policy step 3 (--max-staleness 1)" in details


@pytest.mark.slow
def test_a_sealed_segment_reaches_training_dataset_within_90_seconds(workspace, tmp_path):
    """The daemon with the code location's own intervals: sessions sensor, build, export."""
    sessions = tmp_path / "sessions"
    env = cli_env(workspace, tmp_path / "home")
    env["STATEPOOL_SESSIONS_DIR"] = str(sessions)
    log = tmp_path / "daemon.log"
    session = _in_train("live-")
    with daemon(env, log) as proc:
        # Time from the moment the daemon evaluates sensors, not from its start-up.
        wait_until(lambda: "sessions_sensor" in log.read_text(errors="replace"), 180, proc, log)
        sealed = time.monotonic()
        _write(sessions, session, range(2))
        verl = workspace.store / "exports" / "verl" / "train.parquet"

        def arrived() -> bool:
            if not verl.exists():
                return False
            try:
                infos = [r["extra_info"] for r in pq.read_table(verl).to_pylist()]
            except OSError:
                return False
            return sum(i["session"] == session for i in infos) == 2

        wait_until(arrived, 90, proc, log)
        print(f"sealed segment in training_dataset after {time.monotonic() - sealed:.1f} s")
