"""Every ``statepool`` command tells the truth in its exit code.

0 only when it did what was asked; 2 with one line naming the setting or flag for a bad
path or value; 1 when some runs failed (or there was nothing to export).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.core.export.rows import ExportOptions, split_of
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import STATEPOOL, cli_env

SPEC = SampleSpec(n_runs=3, n_checkpoints=2, n_cards=3, emb_dim=4, episodes_per_batch=2)
RUN_NAMES = [f"run{i:03d}" for i in range(SPEC.n_runs)]


@pytest.fixture(scope="module")
def store(synced_store) -> Path:
    """A synced store, read (never written) by the export tests."""
    return synced_store(SPEC)


def run(
    tmp_path: Path, *args: str, runs: Path | None = None, store: Path | None = None, **extra: str
) -> subprocess.CompletedProcess:
    where = SimpleNamespace(runs=runs or tmp_path / "runs", store=store or tmp_path / "store")
    env = {**cli_env(where, tmp_path / "home"), **extra}
    return subprocess.run(
        [str(STATEPOOL), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line(done: subprocess.CompletedProcess, *names: str) -> str:
    """The single stderr line of a refused command; it names each of ``names``."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def test_sync_refuses_a_missing_runs_folder(tmp_path):
    line = one_line(run(tmp_path, "sync", runs=tmp_path / "run"), "STATEPOOL_RUNS_DIR")
    assert "does not exist" in line and str(tmp_path / "run") in line


def test_sync_refuses_a_runs_folder_that_is_a_file(tmp_path):
    (tmp_path / "runs.txt").write_text("not a folder", encoding="utf-8")
    line = one_line(run(tmp_path, "sync", runs=tmp_path / "runs.txt"), "STATEPOOL_RUNS_DIR")
    assert "is a file" in line


def test_sync_refuses_a_store_that_is_a_file(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "store").write_text("", encoding="utf-8")
    one_line(run(tmp_path, "sync"), "STATEPOOL_STORE_DIR", "is a file")


def test_demo_refuses_a_runs_setting_that_points_at_a_file(tmp_path):
    (tmp_path / "runs.txt").write_text("", encoding="utf-8")
    one_line(run(tmp_path, "demo", runs=tmp_path / "runs.txt"), "STATEPOOL_RUNS_DIR", "is a file")
    assert not (tmp_path / "store").exists()


def test_status_refuses_a_store_that_does_not_exist(tmp_path):
    (tmp_path / "runs").mkdir()
    one_line(run(tmp_path, "status"), "STATEPOOL_STORE_DIR", "does not exist")


def test_status_refuses_a_missing_runs_folder(tmp_path, store):
    one_line(run(tmp_path, "status", runs=tmp_path / "nope", store=store), "STATEPOOL_RUNS_DIR")


def test_export_refuses_a_store_that_does_not_exist(tmp_path):
    done = run(tmp_path, "export", "--format", "verl", "--out", "o", "--store", "/no/such/store")
    one_line(done, "--store", "/no/such/store", "does not exist")
    assert not (tmp_path / "o").exists()


def test_export_of_an_empty_store_exits_1_and_writes_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    done = run(tmp_path, "export", "--format", "verl", "--out", "o", "--store", "empty")
    assert done.returncode == 1
    assert "nothing to export" in done.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--val-fraction", "1.5"], "--val-fraction"),
        (["--test-fraction", "-0.1"], "--test-fraction"),
        (["--val-fraction", "0.5", "--test-fraction", "0.5"], "--val-fraction + --test-fraction"),
    ],
)
def test_export_names_the_flag_of_an_out_of_range_fraction(tmp_path, store, flags, named):
    done = run(tmp_path, "export", "--format", "trl", "--out", "o", "--store", str(store), *flags)
    line = one_line(done, named)
    assert line.startswith(f"statepool export: {named}: ")
    assert not (tmp_path / "o").exists()


def test_export_refuses_a_fraction_that_leaves_train_without_a_run(tmp_path, store):
    # The smallest share of the grid that sends every run of this store to val.
    fraction = next(
        f / 100
        for f in range(1, 100)
        if all(split_of(r, ExportOptions(val_fraction=f / 100)) == "val" for r in RUN_NAMES)
    )
    args = ("export", "--format", "verl", "--out", "o", "--store", str(store))
    line = one_line(run(tmp_path, *args, "--val-fraction", str(fraction)), "--val-fraction")
    assert "no run fell in train" in line
    assert not (tmp_path / "o").exists()


def test_export_names_a_split_that_got_no_run(tmp_path, store):
    options = ExportOptions(val_fraction=0.01)
    assert all(split_of(r, options) == "train" for r in RUN_NAMES)
    args = ("export", "--format", "verl", "--out", "o", "--store", str(store), "--json")
    done = run(tmp_path, *args, "--val-fraction", "0.01")
    assert done.returncode == 0, done.stderr
    assert "no run fell in split 'val': it has no file" in done.stderr
    assert json.loads(done.stdout)["rows"]["val"] == 0


def test_export_over_another_formats_export_needs_force(tmp_path, store):
    base = ("export", "--out", "out", "--store", str(store))
    assert run(tmp_path, *base, "--format", "trl").returncode == 0
    assert run(tmp_path, *base, "--format", "trl").returncode == 0  # same format: replaced
    line = one_line(run(tmp_path, *base, "--format", "verl"), "--out", "trl export", "--force")
    assert "not verl" in line
    manifest = json.loads((tmp_path / "out" / ".statepool_export").read_text("utf-8"))
    assert manifest["format"] == "trl"  # untouched
    forced = run(tmp_path, *base, "--format", "verl", "--force")
    assert forced.returncode == 0, forced.stderr
    manifest = json.loads((tmp_path / "out" / ".statepool_export").read_text("utf-8"))
    assert manifest["format"] == "verl"


def test_a_new_instance_home_is_announced_once(tmp_path, store):
    where = SimpleNamespace(runs=tmp_path / "runs", store=store)
    (tmp_path / "runs").mkdir()
    env = cli_env(where, tmp_path / "unused_home")
    del env["DAGSTER_HOME"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def status() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(STATEPOOL), "status"], env=env, cwd=elsewhere, capture_output=True, text=True
        )

    first = status()
    assert first.returncode == 0, first.stderr
    warnings = [line for line in first.stderr.splitlines() if line.startswith("statepool: ")]
    assert len(warnings) == 1
    assert str(elsewhere / ".dagster_home") in warnings[0] and "DAGSTER_HOME" in warnings[0]
    second = status()
    assert second.returncode == 0, second.stderr
    assert "statepool: " not in second.stderr


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("{max_ops!x}", "{max_ops!x}"),
        ("{analysis_block:05d}", "{analysis_block:05d}"),
        ("{skill_catalog.upper}", "{skill_catalog.upper}"),
    ],
)
def test_sync_refuses_a_template_no_state_can_fill_before_any_run(tmp_path, template, named):
    generate_runs(tmp_path / "runs", SPEC)
    (tmp_path / "t.txt").write_text(template, encoding="utf-8")
    done = run(tmp_path, "sync", STATEPOOL_PROMPT_TEMPLATE=str(tmp_path / "t.txt"))
    one_line(done, "STATEPOOL_PROMPT_TEMPLATE", named)
    assert not (tmp_path / "store" / "curator_prompts").exists()
