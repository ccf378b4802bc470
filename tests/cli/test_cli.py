"""``statepool`` as users run it: a subprocess on a real instance home."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

from cli_helpers import cli_env
from process_helpers import REPO
from store_helpers import seed_pool, store_pool

SPEC = SampleSpec(n_runs=2, n_checkpoints=4, n_cards=5, emb_dim=8, episodes_per_batch=3)
STATEPOOL = Path(sys.executable).with_name("statepool")


@pytest.fixture
def cli(workspace, tmp_path):
    env = cli_env(workspace, tmp_path / "home")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(STATEPOOL), *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check:
            assert done.returncode == 0, done.stderr
        return done

    return run


@pytest.fixture(scope="module")
def synced_once(tmp_path_factory) -> tuple[Path, dict]:
    """Two sample runs synced once from a fresh home, and the sync's summary: the starting
    point the tests of a later sync copy (a sync costs seconds, a copy milliseconds)."""
    root = tmp_path_factory.mktemp("synced")
    workspace = SimpleNamespace(runs=root / "runs", store=root / "store")
    generate_runs(workspace.runs, SPEC)
    done = subprocess.run(
        [str(STATEPOOL), "sync", "--json"],
        env=cli_env(workspace, root / "home"),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return root, json.loads(done.stdout)


@pytest.fixture
def synced(synced_once, workspace, tmp_path) -> dict:
    """This test's runs, store and instance home as ``synced_once`` left them; its summary."""
    root, first = synced_once
    for name in ("runs", "store", "home"):
        shutil.copytree(root / name, tmp_path / name, symlinks=True, dirs_exist_ok=True)
    return first


def summary(cli, *args: str) -> dict:
    return json.loads(cli("sync", "--json", *args).stdout)


def materialized(report: dict) -> list[str]:
    return [r["run"] for r in report["runs"]]


def test_second_sync_does_nothing(synced, cli):
    first = synced
    assert (first["seen"], first["new"], first["failed"]) == (2, 2, 0)
    assert first["states_written"] == 2 * SPEC.n_checkpoints
    second = summary(cli)
    assert (second["unchanged"], second["new"], second["changed"]) == (2, 0, 0)
    assert materialized(second) == []


def test_sync_after_adding_a_run_materializes_only_it(synced, cli, workspace):
    generate_runs(workspace.runs, SampleSpec(**{**SPEC.__dict__, "run_prefix": "extra"}))
    report = summary(cli)
    assert sorted(materialized(report)) == ["extra000", "extra001"]
    assert report["unchanged"] == 2


def test_sync_after_growing_a_run_materializes_only_it(synced, cli, workspace):
    append_checkpoint(workspace.run("run001"), SPEC, 1)
    report = summary(cli)
    assert materialized(report) == ["run001"]
    assert report["changed"] == 1
    assert report["runs"][0]["states"] == SPEC.n_checkpoints + 1


def test_sync_writes_the_original_scripts_states(synced, workspace, seed):
    assert store_pool(workspace.store) == seed_pool(seed, workspace.runs, workspace.root / "s")


@pytest.fixture(scope="module")
def plain_sync(tmp_path_factory) -> SimpleNamespace:
    """A plain ``statepool sync`` (its table, not JSON) of the sample runs, one of them renamed
    to a name that is no partition: its store and what it printed, read by the tests."""
    root = tmp_path_factory.mktemp("plain")
    where = SimpleNamespace(runs=root / "runs", store=root / "store")
    generate_runs(where.runs, SPEC)
    (where.runs / "run000").rename(where.runs / "bad name")
    done = subprocess.run(
        [str(STATEPOOL), "sync"],
        env=cli_env(where, root / "home"),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return SimpleNamespace(store=where.store, stdout=done.stdout, stderr=done.stderr)


def test_sync_reports_invalid_folder_names(plain_sync):
    assert "bad name" in plain_sync.stderr
    assert "characters outside" in plain_sync.stderr


def test_status_lists_each_run(synced, cli, workspace):
    append_checkpoint(workspace.run("run000"), SPEC, 0)
    rows = {r["run"]: r for r in json.loads(cli("status", "--json").stdout)["runs"]}
    assert rows["run000"]["status"] == "stale"
    assert rows["run001"]["status"] == "materialized"
    assert rows["run001"]["states"] == SPEC.n_checkpoints


def test_demo_generates_sample_runs_and_syncs_them(cli, workspace):
    done = cli("demo")
    assert "generated sample runs" in done.stdout
    assert any((workspace.store / "state_pool").iterdir())
    assert "failed                 0" in done.stdout
    report = workspace.store / "report" / "index.html"
    assert done.stdout.count("report: ") == 1 and f"report: {report}" in done.stdout
    assert "from this export" in report.read_text(encoding="utf-8")  # training_dataset's
    for fmt in ("verl", "trl", "pool"):
        assert (workspace.store / "exports" / fmt / ".statepool_export").is_file()


def test_sync_writes_the_report_with_the_last_exports_splits(plain_sync):
    report = plain_sync.store / "report" / "index.html"
    assert f"report: {report}" in plain_sync.stdout
    assert "from no export yet" in report.read_text(encoding="utf-8")


def test_quick_start_commands_exist_in_the_makefile():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert f"make {target}" in readme
        assert f"\n{target}:" in makefile
    assert "tools.dg_dev --host 127.0.0.1" in makefile  # loopback


def test_sync_on_a_tty_shows_a_progress_bar_and_a_summary_table(workspace, tmp_path):
    import os
    import pty

    generate_runs(workspace.runs, SPEC)
    env = cli_env(workspace, tmp_path / "tty_home")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(STATEPOOL), "sync"], env=env, cwd=tmp_path, stdout=follower, stderr=follower
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the other side closed: the process is done
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(leader)
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert f"] {SPEC.n_runs}/{SPEC.n_runs} runs, {2 * SPEC.n_checkpoints} states" in screen
    assert "[" + "#" * 24 + "]" in screen
    assert "states written" in screen and "runs seen" in screen
    assert "DEBUG" not in screen and "STEP_SUCCESS" not in screen  # Dagster's logs stay quiet


def test_sync_records_checks_in_one_batch(synced, tmp_path):
    from dagster import AssetCheckKey, AssetKey, DagsterInstance

    assert (synced["new"], synced["failed"]) == (2, 0)
    key = AssetCheckKey(AssetKey("curator_prompts"), "states_complete")
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert len(instance.get_runs()) == 1
        history = instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
    assert sorted((r.partition, r.status.value) for r in history) == [
        ("run000", "SUCCEEDED"),
        ("run001", "SUCCEEDED"),
    ]
