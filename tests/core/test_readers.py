"""Reading a synced store without Dagster: load_state_pool and load_prompts."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from statepool_dagster import load_prompts, load_state_pool
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.errors import StatepoolError
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from store_helpers import seed_pool

SPEC = SampleSpec(n_runs=2, n_checkpoints=12, n_cards=4, emb_dim=4, episodes_per_batch=2)


@pytest.fixture
def synced(workspace, instance):
    """Two runs named so that text order and natural order differ (run10 after run2)."""
    generate_runs(workspace.runs, SPEC)
    (workspace.runs / "run000").rename(workspace.runs / "run10")
    (workspace.runs / "run001").rename(workspace.runs / "run2")
    assert not sync(instance).failed
    return workspace


def test_load_state_pool_returns_exactly_the_original_scripts_states(synced, seed):
    written = seed_pool(seed, synced.runs, synced.root / "seed")
    states = load_state_pool()
    assert [s.state_id for s in states] == [
        f"{run}_ckpt{k}" for run in ("run2", "run10") for k in range(SPEC.n_checkpoints)
    ]
    expected = {name: data for files in written.values() for name, data in files.items()}
    assert {f"{s.state_id}.json": s.to_json().encode("utf-8") for s in states} == expected


def test_load_state_pool_reads_only_the_runs_asked_for(synced):
    states = load_state_pool(synced.store, runs=["run10"])
    assert {s.state_id.rsplit("_ckpt", 1)[0] for s in states} == {"run10"}


def test_asking_for_a_run_the_store_lacks_is_an_error(synced):
    with pytest.raises(StatepoolError, match="nope"):
        load_state_pool(runs=["run2", "nope"])
    with pytest.raises(StatepoolError, match="nope"):
        load_prompts(runs=["nope"])


def test_load_prompts_has_one_row_per_state_in_run_then_checkpoint_order(synced):
    frame = load_prompts()
    assert frame["state_id"].tolist() == [s.state_id for s in load_state_pool()]
    assert {"state_id", "run", "version", "prompt", "reference_ops"} <= set(frame.columns)
    direct = pd.read_parquet(synced.store / "curator_prompts" / "run2")
    assert frame[frame["run"] == "run2"]["prompt"].tolist() == direct["prompt"].tolist()


def test_readers_ignore_temp_files(synced):
    pool = synced.store / "state_pool"
    (pool / "run2" / ".run2_ckpt99.json.tmp-0123456789ab").write_text("{half", encoding="utf-8")
    (pool / ".run3.tmp-0123456789ab").mkdir()
    (pool / ".run3.tmp-0123456789ab" / "run3_ckpt0.json").write_text("{}", encoding="utf-8")
    prompts = synced.store / "curator_prompts"
    (prompts / ".run3.parquet.tmp-0123456789ab").write_bytes(b"PAR1 torn")
    assert len(load_state_pool()) == 2 * SPEC.n_checkpoints
    assert set(load_prompts()["run"]) == {"run2", "run10"}


def test_an_empty_store_reads_as_no_states_and_no_prompts(tmp_path):
    assert load_state_pool(tmp_path / "store") == []
    frame = load_prompts(tmp_path / "store")
    assert frame.empty
    assert {"state_id", "prompt", "reference_ops"} <= set(frame.columns)


def test_the_readers_never_import_dagster(synced):
    code = (
        "import sys\n"
        "from statepool_dagster import load_prompts, load_state_pool\n"
        f"assert len(load_state_pool({str(synced.store)!r})) == {2 * SPEC.n_checkpoints}\n"
        f"assert len(load_prompts({str(synced.store)!r})) == {2 * SPEC.n_checkpoints}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'dagster')\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
