"""Trainer-ready exports of a synced store: verl, TRL, pool; splits, de-duplication, asset, CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import datasets
import pyarrow.parquet as pq
import pytest
from dagster import (
    AssetKey,
    AssetSelection,
    DefaultSensorStatus,
    evaluate_automation_conditions,
)

from statepool_dagster import load_prompts, load_state_pool
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.config import Settings
from statepool_dagster.core.errors import StatepoolError
from statepool_dagster.core.export.collect import collect_export
from statepool_dagster.core.export.formats import TRL_SCHEMA, VERL_SCHEMA
from statepool_dagster.core.export.rows import MANIFEST, ExportOptions, split_of
from statepool_dagster.core.export.write import stream_export
from statepool_dagster.core.names import PROMPTS, SNAPSHOTS, STATES
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.states.digest import state_digest
from statepool_dagster.core.states.models import CheckpointState
from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.partitions import RUNS
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

from cli_helpers import STATEPOOL, assert_files_only, cli_env
from instance_helpers import latest_metadata
from process_helpers import REPO, daemon, wait_until

SPEC = SampleSpec(n_runs=8, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
RUN_NAMES = [f"run{i:03d}" for i in range(SPEC.n_runs)]
OPTIONS = ExportOptions(val_fraction=0.3, test_fraction=0.2, seed=0)


@pytest.fixture(scope="module")
def store(synced_store) -> Path:
    """A store synced once for the module's tests that only read it."""
    return synced_store(SPEC)


def split_files(out: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted(out.glob("*.parquet"))}


def prompts_by_id(store: Path) -> dict[str, str]:
    frame = load_prompts(store)
    return dict(zip(frame["state_id"], frame["prompt"], strict=True))


def test_verl_export_has_one_arrow_schema_and_the_fields_verl_reads(store, tmp_path):
    stream_export(store, {"verl": tmp_path / "verl"}, OPTIONS)
    files = split_files(tmp_path / "verl")
    assert set(files) == {"train", "val", "test"}
    prompts = prompts_by_id(store)
    states = {s.state_id: s for s in load_state_pool(store)}
    for split, path in files.items():
        assert pq.read_schema(path).remove_metadata().equals(VERL_SCHEMA)
        rows = pq.read_table(path).to_pylist()
        assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
        for row in rows:
            info = row["extra_info"]
            assert info["split"] == split
            assert row["data_source"] == "statepool/ovo"
            assert row["prompt"] == [{"role": "user", "content": prompts[info["state_id"]]}]
            assert CheckpointState.from_json(info["state"]) == states[info["state_id"]]
            assert info["state_id"] == f"{info['run']}_ckpt{info['version']}"
            ops = json.loads(info["reference_ops"])
            assert row["reward_model"]["style"] == "rule"
            assert json.loads(row["reward_model"]["ground_truth"]) == ops["ops"]
            assert info["has_reference_ops"] == (info["version"] < SPEC.n_checkpoints - 1)


def test_trl_export_has_the_prompt_and_what_a_reward_function_reads(store, tmp_path):
    stream_export(store, {"trl": tmp_path / "trl"}, OPTIONS)
    prompts = prompts_by_id(store)
    for path in split_files(tmp_path / "trl").values():
        assert pq.read_schema(path).remove_metadata().equals(TRL_SCHEMA)
        for row in pq.read_table(path).to_pylist():
            assert row["prompt"] == [{"role": "user", "content": prompts[row["state_id"]]}]
            state = json.loads(row["state"])
            assert state["state_id"] == row["state_id"]
            assert json.loads(row["ground_truth"]) == json.loads(row["reference_ops"])["ops"]
            assert (row["followup_qids"], json.loads(row["gt_map"])) == ([], {})


@pytest.mark.parametrize("fmt", ["verl", "trl"])
def test_parquet_exports_round_trip_through_datasets(store, tmp_path, fmt):
    stream_export(store, {fmt: tmp_path / fmt}, OPTIONS)
    files = split_files(tmp_path / fmt)
    loaded = datasets.load_dataset(
        "parquet",
        data_files={split: str(path) for split, path in files.items()},
        cache_dir=str(tmp_path / "hf_cache"),
    )
    assert sum(loaded[split].num_rows for split in files) == SPEC.n_runs * SPEC.n_checkpoints
    for split, path in files.items():
        assert loaded[split].to_list() == pq.read_table(path).to_pylist()


def test_split_never_divides_a_run(store):
    for seed in range(5):
        export = collect_export(
            store, ExportOptions(val_fraction=0.4, test_fraction=0.2, seed=seed)
        )
        splits_of_run: dict[str, set[str]] = {}
        for row in export.rows:
            splits_of_run.setdefault(row.run, set()).add(row.split)
        assert sorted(splits_of_run) == RUN_NAMES
        assert all(len(s) == 1 for s in splits_of_run.values())
        assert {r: s for s, runs in export.runs.items() for r in runs} == {
            r: next(iter(s)) for r, s in splits_of_run.items()
        }


def test_split_follows_the_fractions_and_the_seed_deterministically():
    names = [f"run-{i}" for i in range(4000)]
    options = ExportOptions(val_fraction=0.2, test_fraction=0.1, seed=7)
    drawn = [split_of(n, options) for n in names]
    assert drawn == [split_of(n, options) for n in names]
    assert abs(drawn.count("val") / len(names) - 0.2) < 0.03
    assert abs(drawn.count("test") / len(names) - 0.1) < 0.03
    other = [split_of(n, options.model_copy(update={"seed": 8})) for n in names]
    assert other != drawn
    # A run's split depends on its own name only: adding runs moves no other run.
    assert [split_of(n, options) for n in names[:10]] == drawn[:10]


def test_fractions_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="train would get no run"):
        ExportOptions(val_fraction=0.7, test_fraction=0.5)
    with pytest.raises(ValueError, match="train would get no run"):
        ExportOptions(val_fraction=0.5, test_fraction=0.5)


def test_a_split_without_runs_writes_no_file_and_says_so(store, tmp_path):
    export = stream_export(store, {"verl": tmp_path / "v"}, ExportOptions(val_fraction=1e-9))
    assert set(split_files(tmp_path / "v")) == {"train"}
    assert export.counts() == {"train": SPEC.n_runs * SPEC.n_checkpoints, "val": 0}
    assert "no run fell in split 'val': it has no file" in export.problems


def test_identical_states_appear_once(workspace, instance):
    generate_runs(workspace.runs, SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4))
    shutil.copytree(workspace.run("run000"), workspace.run("run000-copy"))
    assert not sync(instance).failed
    export = collect_export(workspace.store, ExportOptions(val_fraction=0.5))
    assert [r.state_id for r in export.rows] == [f"run000_ckpt{k}" for k in range(3)]
    assert export.duplicates == {f"run000-copy_ckpt{k}": f"run000_ckpt{k}" for k in range(3)}
    keys = [state_digest(json.loads(r.state)) for r in export.rows]
    assert len(set(keys)) == len(keys)
    dropped = [p for p in export.problems if p.startswith("run000-copy:")]
    assert dropped == [
        "run000-copy: 3 states identical to run000's left out (the earliest run by name keeps "
        "them): run000-copy_ckpt0, run000-copy_ckpt1, run000-copy_ckpt2"
    ]


def test_pool_export_is_read_by_the_original_loader(store, tmp_path, seed):
    stream_export(store, {"pool": tmp_path / "pool"}, OPTIONS)
    original = seed.load_state_pool(str(tmp_path / "pool"))
    ours = load_state_pool(store)
    assert len(original) == len(ours) == SPEC.n_runs * SPEC.n_checkpoints
    assert {s.state_id: s.to_json() for s in original} == {s.state_id: s.to_json() for s in ours}
    for state in ours:
        run = state.state_id.rsplit("_ckpt", 1)[0]
        exported = (tmp_path / "pool" / f"{state.state_id}.json").read_bytes()
        assert exported == (store / "state_pool" / run / f"{state.state_id}.json").read_bytes()


def test_export_never_replaces_a_folder_it_did_not_write(store, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me", "utf-8")
    with pytest.raises(StatepoolError, match="not empty"):
        stream_export(store, {"trl": out})
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_exporting_again_replaces_the_earlier_export_whole(store, tmp_path):
    out = tmp_path / "verl"
    stream_export(store, {"verl": out}, OPTIONS)
    assert "test" in split_files(out)
    stream_export(store, {"verl": out}, ExportOptions(val_fraction=0.3))
    assert set(split_files(out)) == {"train", "val"}
    assert json.loads((out / MANIFEST).read_text("utf-8"))["options"]["test_fraction"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["verl"]  # no temp folder left beside it


def test_training_dataset_materializes_through_the_definitions(workspace, instance):
    generate_runs(workspace.runs, SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4))
    assert not sync(instance).failed
    job = defs().resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance, asset_selection=[AssetKey("training_dataset")]
    )
    assert result.success
    exports = workspace.store / "exports"
    assert sorted(p.name for p in exports.iterdir()) == ["pool", "trl", "verl"]
    assert len(list((exports / "pool").glob("*.json"))) == 9
    metadata = latest_metadata(instance, "training_dataset")
    assert metadata["dagster/row_count"] == 9
    assert metadata["rows_train"] + metadata["rows_val"] == 9
    assert sorted(r for runs in metadata["runs_by_split"].values() for r in runs) == [
        "run000",
        "run001",
        "run002",
    ]
    for fmt in ("verl", "trl"):
        rows = sum(pq.read_metadata(p).num_rows for p in (exports / fmt).glob("*.parquet"))
        assert rows == 9


def evaluate(instance, previous=None):
    """One tick of the automation sensor's evaluation, for training_dataset."""
    return evaluate_automation_conditions(
        defs=defs(),
        instance=instance,
        asset_selection=AssetSelection.assets("training_dataset"),
        cursor=None if previous is None else previous.cursor,
    )


def requested(result) -> int:
    return result.get_num_requested(AssetKey("training_dataset"))


def test_training_dataset_is_requested_when_run_partitions_change(workspace, instance):
    spec = SampleSpec(n_runs=2, n_checkpoints=2, n_cards=4, emb_dim=4)
    generate_runs(workspace.runs, spec)
    start = evaluate(instance)
    assert requested(start) == 0
    assert not sync(instance).failed
    # A registered run that never materialized must not hold the export back.
    instance.add_dynamic_partitions(RUNS, ["never-built"])
    synced = evaluate(instance, start)
    assert requested(synced) == 1
    job = defs().resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(
        instance=instance, asset_selection=[AssetKey("training_dataset")]
    ).success
    quiet = evaluate(instance, synced)
    assert requested(quiet) == 0
    append_checkpoint(workspace.run("run001"), spec, 1)
    assert not sync(instance).failed
    assert requested(evaluate(instance, quiet)) == 1


@pytest.mark.slow
def test_the_daemon_builds_the_export_after_a_dropped_in_run(workspace, tmp_path):
    env = cli_env(workspace, tmp_path / "home")
    env.update(STATEPOOL_SENSOR_INTERVAL="2", STATEPOOL_SETTLE_SECONDS="1")
    log = tmp_path / "daemon.log"
    with daemon(env, log) as proc:
        generate_runs(workspace.runs, SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4))
        pool = workspace.store / "exports" / "pool"
        wait_until(lambda: pool.is_dir() and len(list(pool.glob("*.json"))) == 3, 180, proc, log)


def test_export_automation_sensor_is_on_by_default_and_targets_only_the_export():
    sensor = defs().resolve_sensor_def("training_dataset_automation")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    graph = defs().resolve_asset_graph()
    assert sensor.asset_selection.resolve(graph) == {AssetKey("training_dataset")}
    names = {s.name for s in defs().get_repository_def().sensor_defs}
    assert "default_automation_condition_sensor" not in names  # ours replaces Dagster's (off)


def run_cli(store: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = cli_env(SimpleNamespace(runs=tmp_path / "runs", store=store), tmp_path / "home")
    return subprocess.run(
        [str(STATEPOOL), "export", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_export_writes_the_requested_format(store, tmp_path):
    done = run_cli(
        store, tmp_path, "--format", "verl", "--out", "out", "--val-fraction", "0.5", "--json"
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["format"] == "verl"
    assert sum(summary["rows"].values()) == SPEC.n_runs * SPEC.n_checkpoints
    assert summary["options"] == {"val_fraction": 0.5, "test_fraction": 0.0, "seed": 0}
    files = split_files(tmp_path / "out")
    assert {s: pq.read_metadata(p).num_rows for s, p in files.items()} == summary["rows"]
    done = run_cli(store, tmp_path, "--format", "pool", "--out", "pool", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert re.match(r"pool export in .*pool: rows train \d+, val \d+", done.stdout)
    assert len(list((tmp_path / "pool").glob("*.json"))) == SPEC.n_runs * SPEC.n_checkpoints


def test_cli_export_refuses_bad_fractions_and_foreign_folders(store, tmp_path):
    bad = run_cli(store, tmp_path, "--format", "trl", "--out", "o", "--val-fraction", "1.5")
    assert bad.returncode == 2
    assert bad.stderr.startswith("statepool export: --val-fraction: ")
    assert len(bad.stderr.splitlines()) == 1
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x.txt").write_text("x", "utf-8")
    refused = run_cli(store, tmp_path, "--format", "trl", "--out", "taken")
    assert refused.returncode == 2
    assert "--out: " in refused.stderr and "not empty" in refused.stderr


def test_cli_export_never_imports_dagster(store, tmp_path):
    assert_files_only(
        ["export", "--format", "trl", "--out", str(tmp_path / "o"), "--store", str(store)]
    )


def test_readme_trainer_script_loads_an_export_with_datasets(store, tmp_path):
    readme = (REPO / "README.md").read_text("utf-8")
    section = readme.split("## For the trainer", 1)[1]
    script = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(script.strip().splitlines()) <= 5
    stream_export(store, {"verl": tmp_path / "store" / "exports" / "verl"}, OPTIONS)
    rows = SPEC.n_runs * SPEC.n_checkpoints
    check = (
        "\nassert sum(len(split) for split in ds.values()) <= " + str(rows) + "\n"
        "assert row['prompt'][0]['role'] == 'user'\n"
        "info = row['extra_info']\n"
        "assert json.loads(info['state'])['state_id'] == info['state_id']\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + script + check],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf_home")},
    )
    assert done.returncode == 0, done.stderr


def test_a_run_mid_rebuild_is_left_out_until_its_prompts_match_its_states(tmp_path, monkeypatch):
    """New states with the previous prompts would pair a prompt with the wrong state."""
    runs, store = tmp_path / "runs", tmp_path / "store"
    generate_runs(runs, SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4))
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for run in ("run000", "run001"):
        build_run(settings, run)
    snapshot = runs / "run001" / "snapshots" / "skills_v1.json"
    library = json.loads(snapshot.read_text(encoding="utf-8"))
    library["cards"][0]["program"] = "A rewritten program"
    snapshot.write_text(json.dumps(library), encoding="utf-8")
    build_run(settings, "run001", [SNAPSHOTS, STATES])  # not yet curator_prompts: a rebuild
    monkeypatch.setattr("statepool_dagster.core.export.collect.READ_RETRY_DELAYS", (0.01,))
    midway = collect_export(store)
    assert {row.run for row in midway.rows} == {"run000"}
    assert [p for p in midway.problems if p.startswith("run001:")] == [
        "run001: its prompts were not rendered from its current states (a rebuild in progress, "
        "or one that failed before its prompts): run left out; materialize it again"
    ]
    build_run(settings, "run001", [PROMPTS])
    done = collect_export(store)
    assert {row.run for row in done.rows} == {"run000", "run001"}
    assert not [p for p in done.problems if p.startswith("run001:")]
    row = next(r for r in done.rows if r.state_id == "run001_ckpt1")
    assert "A rewritten program" in row.state and "A rewritten program" in row.prompt
