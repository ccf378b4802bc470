"""The pipeline with its store and runs folder on fsspec filesystems equals the local store.

Two non-local backends: fsspec's ``memory://`` (in this process only) and ``local://``
(fsspec's LocalFileSystem, so the fsspec code path on a local folder: it works across
processes, which is how ``statepool sync`` runs on it as a subprocess).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from dagster import AssetCheckKey, AssetKey, build_sensor_context

from statepool_dagster import load_prompts, load_state_pool
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.errors import StatepoolError
from statepool_dagster.core.export.rows import FORMATS
from statepool_dagster.core.export.write import stream_export
from statepool_dagster.core.locations import as_path, is_local, upload_tree
from statepool_dagster.core.names import DIR_MANIFEST
from statepool_dagster.core.store import atomic as store_module
from statepool_dagster.core.store.atomic import replace_dir_atomic
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.reading import read_run_table
from statepool_dagster.definitions import defs
from statepool_dagster.defs.runs.partitions import RUNS
from statepool_dagster.defs.runs.sensors import runs_sensor_def
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

from cli_helpers import cli_env
from instance_helpers import latest_metadata, materialize_run, new_instance
from store_helpers import assert_same_store, store_files

runs_sensor = runs_sensor_def()  # at the default interval
SPEC = SampleSpec(n_runs=3, n_checkpoints=4, n_cards=5, emb_dim=8, episodes_per_batch=3)
RUN_NAMES = [f"run{i:03d}" for i in range(SPEC.n_runs)]
STATEPOOL = Path(sys.executable).with_name("statepool")
ESCAPING = ["..", "../other", "a/b", "/etc", ".", "", "..\\x", "run/../../x", "ok\x00"]


@pytest.fixture(autouse=True)
def private_temp(tmp_path, monkeypatch):
    """Lock files of non-local stores go under the temp folder: keep them in the test's own."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))


@pytest.fixture
def memory_url():
    """A fresh ``memory://`` root, removed afterwards (the memory filesystem is process-wide)."""
    url = f"memory://statepool-{uuid.uuid4().hex[:12]}"
    yield url
    root = as_path(url)
    if root.exists():
        root.fs.rm(root.path, recursive=True)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """Sample runs on the local disk, shared by every test here (read only)."""
    runs = tmp_path_factory.mktemp("generated") / "runs"
    generate_runs(runs, SPEC)
    return runs


@pytest.fixture(scope="module")
def local_store(generated, tmp_path_factory) -> Path:
    """The plain local store of the generated runs: what every other backend must equal."""
    root = tmp_path_factory.mktemp("local")
    with pytest.MonkeyPatch.context() as env, new_instance(root / "home") as i:
        env.setenv("STATEPOOL_RUNS_DIR", str(generated))
        env.setenv("STATEPOOL_STORE_DIR", str(root / "store"))
        assert not sync(i).failed
    return root / "store"


@pytest.fixture
def fresh_instance(tmp_path):
    with new_instance(tmp_path / "dagster_home") as inst:
        yield inst


def point_at(monkeypatch, runs, store) -> None:
    monkeypatch.setenv("STATEPOOL_RUNS_DIR", str(runs))
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(store))


def write_state_pool(layout: StoreLayout, run: str, states) -> None:
    """A state folder written whole, as the exports' folders are: files, then the manifest."""
    replace_dir_atomic(layout.state_pool(run), ((f"{s}.json", t.encode()) for s, t in states))


def test_sync_on_a_memory_store_writes_exactly_what_the_local_store_holds(
    generated, local_store, memory_url, fresh_instance, monkeypatch
):
    point_at(monkeypatch, generated, f"{memory_url}/store")
    first = sync(fresh_instance)
    assert not first.failed
    runs = fresh_instance.get_runs()  # one batch run over the three partitions, no retries
    assert [(r.job_name, r.is_success) for r in runs] == [("statepool_job", True)]
    assert first.states_written == SPEC.n_runs * SPEC.n_checkpoints
    assert_same_store(f"{memory_url}/store", local_store)
    assert sync(fresh_instance).counts()["unchanged"] == SPEC.n_runs


def test_state_folders_on_a_memory_store_are_named_by_their_manifest(
    generated, memory_url, fresh_instance, monkeypatch
):
    point_at(monkeypatch, generated, f"{memory_url}/store")
    assert materialize_run(fresh_instance, "run000").success
    folder = StoreLayout(f"{memory_url}/store").state_pool("run000")
    manifest = json.loads((folder / DIR_MANIFEST).read_bytes())
    expected = [f"run000_ckpt{k}.json" for k in range(SPEC.n_checkpoints)]
    assert sorted(manifest["files"]) == expected
    assert sorted(p.name for p in folder.iterdir()) == sorted([*expected, DIR_MANIFEST])


def test_rematerializing_on_a_memory_store_deletes_the_states_it_no_longer_has(
    generated, tmp_path, memory_url, fresh_instance, monkeypatch
):
    runs = tmp_path / "runs"
    upload_tree(generated, runs)  # a copy this test may change
    point_at(monkeypatch, runs, f"{memory_url}/store")
    assert materialize_run(fresh_instance, "run000").success
    (runs / "run000" / "snapshots" / f"skills_v{SPEC.n_checkpoints - 1}.json").unlink()
    assert materialize_run(fresh_instance, "run000").success
    layout = StoreLayout(f"{memory_url}/store")
    names = sorted(p.name for p in layout.state_pool("run000").iterdir())
    kept = [f"run000_ckpt{k}.json" for k in range(SPEC.n_checkpoints - 1)]
    assert names == sorted([*kept, DIR_MANIFEST])
    assert [s.state_id for s in load_state_pool()] == [n.removesuffix(".json") for n in kept]
    assert len(read_run_table(layout, "checkpoint_states", "run000")) == len(kept)


def test_asset_checks_and_the_io_manager_read_a_memory_store(
    generated, memory_url, fresh_instance, monkeypatch
):
    point_at(monkeypatch, generated, f"{memory_url}/store")
    assert not sync(fresh_instance).failed  # one batch run, checks included
    keys = [
        AssetCheckKey(AssetKey(asset), name)
        for asset, name in (
            ("checkpoint_states", "inputs_clean"),
            ("curator_prompts", "states_complete"),
        )
    ]
    executions = fresh_instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    assert set(executions) == set(keys)
    for execution in executions.values():
        assert execution.evaluation.passed
    frame = defs().load_asset_value(
        "curator_prompts", partition_key="run001", instance=fresh_instance
    )
    expected = read_run_table(StoreLayout(f"{memory_url}/store"), "curator_prompts", "run001")
    pd.testing.assert_frame_equal(frame, expected.to_pandas())


def test_readers_read_a_memory_store_as_they_read_the_local_store(
    generated, local_store, memory_url, fresh_instance, monkeypatch
):
    point_at(monkeypatch, generated, f"{memory_url}/store")
    assert not sync(fresh_instance).failed
    assert load_state_pool(f"{memory_url}/store") == load_state_pool(local_store)
    assert load_state_pool() == load_state_pool(local_store)  # STATEPOOL_STORE_DIR
    assert load_state_pool(f"{memory_url}/store", runs=["run001"]) == load_state_pool(
        local_store, runs=["run001"]
    )
    pd.testing.assert_frame_equal(load_prompts(f"{memory_url}/store"), load_prompts(local_store))


def test_reader_skips_files_its_manifest_does_not_name(memory_url):
    layout = StoreLayout(f"{memory_url}/store")
    write_state_pool(layout, "run000", [("run000_ckpt0", '{"a": 1}')])
    folder = layout.state_pool("run000")
    (folder / "run000_ckpt9.json").write_bytes(b"{half")  # a newer write, not yet named
    files = store_module.read_dir_files(folder, lambda n: n.endswith(".json"))
    assert files == {"run000_ckpt0.json": b'{"a": 1}'}


def test_reader_waits_for_a_rewrite_in_progress_and_returns_it_whole(memory_url, monkeypatch):
    layout = StoreLayout(f"{memory_url}/store")
    write_state_pool(layout, "run000", [("run000_ckpt0", '{"v": 1}'), ("run000_ckpt1", '{"v": 1}')])
    folder = layout.state_pool("run000")
    (folder / "run000_ckpt0.json").write_bytes(b'{"v": 2}')  # the writer is half-way

    def writer_finishes(seconds: float) -> None:
        new = [("run000_ckpt0", '{"v": 2}'), ("run000_ckpt1", '{"v": 2}')]
        write_state_pool(layout, "run000", new)

    monkeypatch.setattr(store_module.time, "sleep", writer_finishes)
    files = store_module.read_dir_files(folder, lambda n: n.endswith(".json"))
    assert files == {"run000_ckpt0.json": b'{"v": 2}', "run000_ckpt1.json": b'{"v": 2}'}


def test_reader_of_an_interrupted_rewrite_fails_instead_of_mixing_versions(memory_url, monkeypatch):
    layout = StoreLayout(f"{memory_url}/store")
    write_state_pool(layout, "run000", [("run000_ckpt0", '{"v": 1}'), ("run000_ckpt1", '{"v": 1}')])
    (layout.state_pool("run000") / "run000_ckpt0.json").write_bytes(b'{"v": 2}')
    monkeypatch.setattr(store_module, "READ_RETRY_DELAYS", (0.0, 0.0))
    with pytest.raises(StatepoolError, match="do not match its manifest"):
        load_state_pool(f"{memory_url}/store")


def test_exports_of_a_memory_store_equal_the_local_stores(
    generated, local_store, memory_url, fresh_instance, monkeypatch, tmp_path
):
    point_at(monkeypatch, generated, f"{memory_url}/store")
    assert not sync(fresh_instance).failed
    for fmt in FORMATS:
        stream_export(local_store, {fmt: tmp_path / "local" / fmt})
        stream_export(f"{memory_url}/store", {fmt: tmp_path / "from_memory" / fmt})
        stream_export(f"{memory_url}/store", {fmt: f"{memory_url}/out/{fmt}"})
        stream_export(f"{memory_url}/store", {fmt: f"{memory_url}/out/{fmt}"})  # replaces itself
        assert_same_store(tmp_path / "from_memory" / fmt, tmp_path / "local" / fmt)
        assert_same_store(f"{memory_url}/out/{fmt}", tmp_path / "local" / fmt)


def test_export_refuses_a_memory_folder_that_is_not_an_export(memory_url, local_store):
    (as_path(f"{memory_url}/mine") / "notes.txt").write_bytes(b"keep me")
    with pytest.raises(StatepoolError, match="holds no earlier export"):
        stream_export(local_store, {"pool": f"{memory_url}/mine"})
    assert (as_path(f"{memory_url}/mine") / "notes.txt").read_bytes() == b"keep me"


def test_training_dataset_on_a_memory_store_writes_its_exports_there(
    generated, local_store, memory_url, fresh_instance, monkeypatch, tmp_path
):
    point_at(monkeypatch, generated, f"{memory_url}/store")
    assert not sync(fresh_instance).failed
    job = defs().resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=fresh_instance, asset_selection=[AssetKey("training_dataset")]
    )
    assert result.success
    for fmt in FORMATS:
        stream_export(local_store, {fmt: tmp_path / "local" / fmt})
        assert_same_store(f"{memory_url}/store/exports/{fmt}", tmp_path / "local" / fmt)


def tick(instance):
    with build_sensor_context(
        instance_ref=instance.get_ref(), definitions=defs(), resources=defs().resources
    ) as context:
        return runs_sensor.evaluate_tick(context)


def test_runs_folder_on_memory_builds_the_same_states(
    generated, local_store, memory_url, fresh_instance, monkeypatch, tmp_path
):
    upload_tree(generated, as_path(f"{memory_url}/runs"))
    point_at(monkeypatch, f"{memory_url}/runs", tmp_path / "store")
    first = sync(fresh_instance)
    assert not first.failed
    assert first.counts()["new"] == SPEC.n_runs
    ours, expected = store_files(tmp_path / "store"), store_files(local_store)
    assert sorted(ours) == sorted(expected)
    for rel, data in ours.items():
        if rel.endswith(".parquet"):
            # file_stamp (snapshot size:mtime[:etag]) and the source fingerprint name where
            # the files came from; everything built from them is the same.
            got = pd.read_parquet(tmp_path / "store" / rel)
            want = pd.read_parquet(local_store / rel)
            columns = [c for c in want.columns if c != "file_stamp"]
            pd.testing.assert_frame_equal(got[columns], want[columns])
        else:
            assert data == expected[rel], rel
    assert sync(fresh_instance).counts()["unchanged"] == SPEC.n_runs


def test_changed_run_on_memory_is_rebuilt_and_reuses_its_unchanged_snapshots(
    generated, memory_url, fresh_instance, monkeypatch, tmp_path
):
    upload_tree(generated, as_path(f"{memory_url}/runs"))
    point_at(monkeypatch, f"{memory_url}/runs", f"{memory_url}/store")
    assert not sync(fresh_instance).failed
    grown = tmp_path / "run001"
    upload_tree(generated / "run001", grown)
    version = append_checkpoint(grown, SPEC, 1)
    remote = as_path(f"{memory_url}/runs/run001")
    for rel in ("episodes.jsonl", f"snapshots/skills_v{version}.json"):  # only what changed
        remote.joinpath(*rel.split("/")).write_bytes((grown / rel).read_bytes())
    second = sync(fresh_instance)
    assert [(o.run, o.states) for o in second.outcomes] == [("run001", SPEC.n_checkpoints + 1)]
    assert second.counts()["changed"] == 1
    assert latest_metadata(fresh_instance, "skill_snapshots", "run001")["reused"] == (
        SPEC.n_checkpoints
    )


def test_sensor_registers_and_requests_runs_from_a_memory_runs_folder(
    generated, memory_url, fresh_instance, monkeypatch
):
    upload_tree(generated, as_path(f"{memory_url}/runs"))
    point_at(monkeypatch, f"{memory_url}/runs", f"{memory_url}/store")
    monkeypatch.setenv("STATEPOOL_SETTLE_SECONDS", "3600")
    waiting = tick(fresh_instance)  # files just written: their mtimes are read through fsspec
    assert waiting.run_requests == []
    assert f"{SPEC.n_runs} still being written" in waiting.skip_message
    monkeypatch.setenv("STATEPOOL_SETTLE_SECONDS", "0")
    fresh_instance.add_dynamic_partitions(RUNS, RUN_NAMES)
    result = tick(fresh_instance)
    assert [r.partition_key for r in result.run_requests] == RUN_NAMES
    assert not sync(fresh_instance).failed
    assert tick(fresh_instance).run_requests == []


def test_file_urls_take_the_local_path(
    generated, local_store, fresh_instance, monkeypatch, tmp_path
):
    assert as_path(f"file://{tmp_path}") == tmp_path
    assert as_path(f"file://localhost{tmp_path}") == tmp_path
    assert not is_local(as_path(f"local://{tmp_path}"))
    point_at(monkeypatch, f"file://{generated}", f"file://{tmp_path / 'store'}")
    assert not sync(fresh_instance).failed
    assert (tmp_path / "store" / ".locks").is_dir()  # flock, on the local fast path
    assert not list((tmp_path / "store" / "state_pool").glob(f"*/{DIR_MANIFEST}"))
    assert_same_store(tmp_path / "store", local_store)


@pytest.mark.parametrize("run", ESCAPING)
def test_a_memory_store_refuses_run_names_that_escape(memory_url, run):
    layout = StoreLayout(f"{memory_url}/store")
    for path_of in (
        lambda: layout.table("run_episodes", run),
        lambda: layout.state_pool(run),
        lambda: layout.rejects(run),
    ):
        with pytest.raises(ValueError):
            path_of()
    with pytest.raises(ValueError), layout.lock(run):
        pass


def test_a_memory_store_refuses_an_asset_folder_that_leaves_the_root(memory_url):
    with pytest.raises(ValueError, match="leave the store root"):
        StoreLayout(f"{memory_url}/store").table("../outside", "run000")


def test_statepool_sync_and_export_as_subprocesses_on_an_fsspec_store(
    generated, local_store, tmp_path
):
    store = f"local://{tmp_path / 'store'}"
    env = cli_env(SimpleNamespace(runs=generated, store=store), tmp_path / "home")

    def statepool(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(STATEPOOL), *args], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done

    first = json.loads(statepool("sync", "--json").stdout)
    assert (first["new"], first["failed"]) == (SPEC.n_runs, 0)
    assert not (tmp_path / "store" / ".locks").exists()  # the fsspec path, not the local one
    assert_same_store(store, local_store)
    assert json.loads(statepool("sync", "--json").stdout)["unchanged"] == SPEC.n_runs
    for fmt in FORMATS:
        statepool("export", "--format", fmt, "--store", store, "--out", str(tmp_path / fmt))
        stream_export(local_store, {fmt: tmp_path / "expected" / fmt})
        assert_same_store(tmp_path / fmt, tmp_path / "expected" / fmt)
