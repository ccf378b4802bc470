"""The real Definitions, materialized in a real instance: outputs, metadata, store layout."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance

from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.partitions import RUNS
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

from instance_helpers import new_instance
from store_helpers import seed_pool, store_pool

SPEC = SampleSpec(n_runs=2, n_checkpoints=5, n_cards=6, emb_dim=8, episodes_per_batch=4)


def materialize_run(instance: DagsterInstance, run: str):
    if run not in instance.get_dynamic_partitions(RUNS):
        instance.add_dynamic_partitions(RUNS, [run])
    return (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key=run)
    )


def latest_metadata(instance: DagsterInstance, asset: str, run: str) -> dict:
    from dagster import AssetRecordsFilter

    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[run]), limit=1
    ).records
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """run000 of the sample runs materialized once, for the tests that only read what it wrote:
    its runs and store folders, its instance (open) and the job's result."""
    root = tmp_path_factory.mktemp("built")
    runs, store = root / "runs", root / "store"
    generate_runs(runs, SPEC)
    with new_instance(root / "home") as instance:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("STATEPOOL_RUNS_DIR", str(runs))
            env.setenv("STATEPOOL_STORE_DIR", str(store))
            result = materialize_run(instance, "run000")
        yield SimpleNamespace(runs=runs, store=store, instance=instance, result=result)


def test_job_writes_every_asset_for_the_partition(built):
    assert built.result.success
    for asset in ("run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts"):
        assert (built.store / asset / "run000").is_dir()
        assert not (built.store / asset / "run001").exists()
    names = sorted(p.name for p in (built.store / "state_pool" / "run000").iterdir())
    assert names == sorted(f"run000_ckpt{k}.json" for k in range(SPEC.n_checkpoints))


def test_store_holds_no_pickle_and_no_temp_files(built):
    assert built.result.success
    files = [p for p in built.store.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert path.suffix in {".parquet", ".json", ".jsonl", ".lock"}, path
        assert ".tmp-" not in path.name


def test_state_pool_equals_the_original_script(workspace, instance, seed):
    generate_runs(workspace.runs, SPEC)
    for run in ("run000", "run001"):
        assert materialize_run(instance, run).success
    assert store_pool(workspace.store) == seed_pool(seed, workspace.runs, workspace.root / "seed")


def test_run_episodes_table_keeps_every_record_losslessly(built):
    assert built.result.success
    frame = pd.read_parquet(built.store / "run_episodes" / "run000")
    lines = (built.runs / "run000" / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    assert frame["line"].tolist() == list(range(1, len(lines) + 1))
    assert [json.loads(r) for r in frame["record"]] == [json.loads(line) for line in lines]
    assert frame["version"].tolist() == [json.loads(x)["skill_lib_version"] for x in lines]
    assert set(frame["task"]) <= {
        "EPM", "ASI", "HLD", "STU", "OJR", "ATR", "ACR", "OCR", "FPD", "REC", "SSR", "CRR",
    }  # fmt: skip


def test_skill_snapshots_table_has_one_row_per_version_without_embeddings(built):
    assert built.result.success
    frame = pd.read_parquet(built.store / "skill_snapshots" / "run000")
    assert frame["version"].tolist() == list(range(SPEC.n_checkpoints))
    assert "_trigger_emb" not in "".join(frame["library"])
    assert (frame["n_cards"] > 0).all()


def test_curator_prompts_have_the_columns_a_trainer_reads(built):
    assert built.result.success
    table = pq.read_table(built.store / "curator_prompts" / "run000")
    assert {"state_id", "run", "version", "prompt"} <= set(table.column_names)
    frame = table.to_pandas()
    assert frame["state_id"].tolist() == [f"run000_ckpt{k}" for k in range(SPEC.n_checkpoints)]
    assert all("## Raw episodes" in p for p in frame["prompt"])


def test_materializations_carry_counts_fingerprint_and_preview(built):
    instance = built.instance
    assert built.result.success
    episodes = latest_metadata(instance, "run_episodes", "run000")
    assert episodes["dagster/row_count"] == SPEC.n_checkpoints * SPEC.episodes_per_batch
    assert episodes["versions"] == list(range(SPEC.n_checkpoints))
    assert episodes["rejects"] == 0
    snapshots = latest_metadata(instance, "skill_snapshots", "run000")
    assert snapshots["snapshots"] == SPEC.n_checkpoints
    states = latest_metadata(instance, "checkpoint_states", "run000")
    assert states["states"] == SPEC.n_checkpoints
    assert states["skipped_checkpoints"] == 0
    assert "run000_ckpt0" in states["preview"]
    prompts = latest_metadata(instance, "curator_prompts", "run000")
    assert (
        prompts["prompt_chars_min"] <= prompts["prompt_chars_median"] <= prompts["prompt_chars_max"]
    )
    fingerprints = {
        latest_metadata(instance, a, "run000")["source_fingerprint"]
        for a in ("run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts")
    }
    assert len(fingerprints) == 1


def test_per_version_metadata_keeps_the_newest_versions_of_a_long_run(workspace, instance):
    from statepool_dagster.core.store.preview import RECENT_VERSIONS

    n = RECENT_VERSIONS + 7
    long = SampleSpec(n_runs=1, n_checkpoints=n, n_cards=2, emb_dim=4, episodes_per_batch=1)
    generate_runs(workspace.runs, long)
    assert materialize_run(instance, "run000").success
    newest = [str(v) for v in range(n - RECENT_VERSIONS, n)]
    episodes = latest_metadata(instance, "run_episodes", "run000")
    assert episodes["batches"] == n  # the counts still cover every version
    assert episodes["versions"] == [int(v) for v in newest]
    assert sorted(episodes["accuracy_by_version"], key=int) == newest  # JSON sorts keys
    snapshots = latest_metadata(instance, "skill_snapshots", "run000")
    assert snapshots["snapshots"] == n
    assert sorted(snapshots["cards_by_version"], key=int) == newest


def test_skipped_checkpoint_is_reported_with_its_reason(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    path = workspace.run("run000") / "episodes.jsonl"
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if json.loads(line)["skill_lib_version"] not in (2, 3)
    ]
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    assert materialize_run(instance, "run000").success
    states = latest_metadata(instance, "checkpoint_states", "run000")
    assert states["skipped"] == {"3": "no episodes with skill_lib_version 2 or 3"}
    assert not (workspace.store / "state_pool" / "run000" / "run000_ckpt3.json").exists()


def test_rematerializing_replaces_the_partition_wholly(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert materialize_run(instance, "run000").success
    (workspace.run("run000") / "snapshots" / "skills_v4.json").unlink()
    assert materialize_run(instance, "run000").success
    names = {p.name for p in (workspace.store / "state_pool" / "run000").iterdir()}
    assert "run000_ckpt4.json" not in names
    assert len(pd.read_parquet(workspace.store / "checkpoint_states" / "run000")) == 4


def test_growing_run_adds_its_new_checkpoint(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert materialize_run(instance, "run000").success
    version = append_checkpoint(workspace.run("run000"), SPEC, 0)
    assert materialize_run(instance, "run000").success
    assert (workspace.store / "state_pool" / "run000" / f"run000_ckpt{version}.json").is_file()


def test_run_with_no_snapshots_has_no_states_and_does_not_fail(workspace, instance):
    run = workspace.run("fresh")
    run.mkdir()
    (run / "episodes.jsonl").write_text('{"id": "a", "skill_lib_version": 0}\n', encoding="utf-8")
    assert materialize_run(instance, "fresh").success
    assert latest_metadata(instance, "checkpoint_states", "fresh")["states"] == 0
    assert pd.read_parquet(workspace.store / "curator_prompts" / "fresh").empty


def test_load_asset_value_reads_a_partition_through_the_io_manager(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert materialize_run(instance, "run001").success
    frame = defs().load_asset_value("curator_prompts", partition_key="run001", instance=instance)
    assert frame["state_id"].iloc[0] == "run001_ckpt0"
    # Nullable columns come back nullable, as pandas wrote them before the tables were Arrow's.
    episodes = defs().load_asset_value("run_episodes", partition_key="run001", instance=instance)
    snapshots = defs().load_asset_value(
        "skill_snapshots", partition_key="run001", instance=instance
    )
    assert (episodes["correct"].dtype, snapshots["declared_version"].dtype) == ("boolean", "Int64")
    assert (episodes["line"].dtype, snapshots["version"].dtype) == ("int64", "int64")


@pytest.mark.parametrize("bad", ["../escape", "a/b", "c,d"])
def test_job_refuses_unsafe_partition_keys(workspace, instance, bad):
    instance.add_dynamic_partitions(RUNS, [bad])
    result = (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key=bad, raise_on_error=False)
    )
    assert not result.success
    assert not (workspace.root / "escape.parquet").exists()
    assert not workspace.store.exists() or not any(workspace.store.rglob("*.parquet"))


@pytest.mark.parametrize("bad", ["../escape", "a/b", "c,d", ".hidden"])
def test_io_manager_paths_refuse_unsafe_partition_keys(workspace, bad):
    from upath import UPath

    from statepool_dagster.defs.io_managers import ParquetStore

    with pytest.raises(ValueError, match="invalid run name"):
        ParquetStore(base_path=UPath(workspace.store)).make_safe_partition_path(
            UPath(workspace.store) / "run_episodes", bad
        )
