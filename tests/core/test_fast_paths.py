"""Every shortcut of the pipeline gives exactly what the plain path gives."""

from __future__ import annotations

import json
import os

import pandas as pd

from statepool_dagster.cli.sync import sync
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs
from statepool_dagster.readers import load_prompts

from instance_helpers import latest_metadata, materialize_run, new_instance
from store_helpers import store_pool

SPEC = SampleSpec(n_runs=3, n_checkpoints=5, n_cards=6, emb_dim=8, episodes_per_batch=3)


def tables(store) -> dict[str, pd.DataFrame]:
    return {
        asset: pd.concat(
            [pd.read_parquet(p) for p in sorted((store / asset).iterdir()) if p.is_dir()],
            ignore_index=True,
        )
        for asset in ("run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts")
    }


def test_batched_sync_equals_one_run_at_a_time(workspace, tmp_path, monkeypatch):
    generate_runs(workspace.runs, SPEC)
    with new_instance(tmp_path / "a") as batched:
        summary = sync(batched, batch_size=16)
        assert not summary.failed
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(tmp_path / "single_store"))
    with new_instance(tmp_path / "b") as single:
        assert not sync(single, batch_size=1).failed
    assert store_pool(workspace.store) == store_pool(tmp_path / "single_store")
    ours, plain = tables(workspace.store), tables(tmp_path / "single_store")
    for asset in ours:
        columns = [c for c in ours[asset].columns if c != "file_stamp"]
        pd.testing.assert_frame_equal(ours[asset][columns], plain[asset][columns])


def test_batched_sync_records_each_runs_own_fingerprint(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    sync(instance)
    fingerprints = {
        run: latest_metadata(instance, "curator_prompts", run)["source_fingerprint"]
        for run in ("run000", "run001", "run002")
    }
    assert len(set(fingerprints.values())) == 3
    assert sync(instance).counts()["unchanged"] == 3


def test_grown_run_reuses_unchanged_checkpoints_and_equals_a_fresh_build(
    workspace, instance, tmp_path, monkeypatch
):
    generate_runs(workspace.runs, SPEC)
    assert materialize_run(instance, "run001").success
    append_checkpoint(workspace.run("run001"), SPEC, 1)
    assert materialize_run(instance, "run001").success
    assert latest_metadata(instance, "skill_snapshots", "run001")["reused"] == SPEC.n_checkpoints
    assert latest_metadata(instance, "curator_prompts", "run001")["reused"] == SPEC.n_checkpoints
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(tmp_path / "fresh"))
    with new_instance(tmp_path / "fresh_home") as fresh:
        assert materialize_run(fresh, "run001").success
    assert store_pool(workspace.store)["run001"] == store_pool(tmp_path / "fresh")["run001"]
    grown = pd.read_parquet(workspace.store / "curator_prompts" / "run001")
    rebuilt = pd.read_parquet(tmp_path / "fresh" / "curator_prompts" / "run001")
    pd.testing.assert_frame_equal(grown, rebuilt)


def test_snapshot_rewritten_in_place_is_parsed_again(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert materialize_run(instance, "run000").success
    path = workspace.run("run000") / "snapshots" / "skills_v2.json"
    library = json.loads(path.read_text(encoding="utf-8"))
    library["cards"][0]["trigger"] = "When the rewritten trigger applies"
    stat = path.stat()
    with open(path, "w", encoding="utf-8") as f:  # same name, same folder: in place
        f.write(json.dumps(library, ensure_ascii=False))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert materialize_run(instance, "run000").success
    assert (
        latest_metadata(instance, "skill_snapshots", "run000")["reused"] == SPEC.n_checkpoints - 1
    )
    state = json.loads(
        (workspace.store / "state_pool" / "run000" / "run000_ckpt2.json").read_text("utf-8")
    )
    assert state["lib_snapshot"]["cards"][0]["trigger"] == "When the rewritten trigger applies"
    prompts = load_prompts(workspace.store, runs=["run000"])
    assert "When the rewritten trigger applies" in prompts.loc[2, "prompt"]


def test_changed_prompt_template_renders_every_prompt_again(
    workspace, instance, tmp_path, monkeypatch
):
    generate_runs(workspace.runs, SPEC)
    assert materialize_run(instance, "run000").success
    template = tmp_path / "template.txt"
    template.write_text("v{version} n={n_cards}\n{skill_catalog}", encoding="utf-8")
    monkeypatch.setenv("STATEPOOL_PROMPT_TEMPLATE", str(template))
    assert materialize_run(instance, "run000").success
    assert latest_metadata(instance, "curator_prompts", "run000")["reused"] == 0
    prompts = load_prompts(workspace.store, runs=["run000"])
    assert prompts["prompt"].str.startswith("v").all()


def test_edited_episode_formatter_renders_every_prompt_again(
    workspace, instance, tmp_path, monkeypatch
):
    generate_runs(workspace.runs, SPEC)
    formatter = tmp_path / "fmt.py"
    formatter.write_text("def f(episodes):\n    return 'first wording'\n", encoding="utf-8")
    monkeypatch.setenv("STATEPOOL_EPISODE_FORMATTER", f"{formatter}:f")
    assert materialize_run(instance, "run000").success
    formatter.write_text("def f(episodes):\n    return 'second wording'\n", encoding="utf-8")
    assert materialize_run(instance, "run000").success
    assert latest_metadata(instance, "curator_prompts", "run000")["reused"] == 0
    prompts = load_prompts(workspace.store, runs=["run000"])
    assert prompts["prompt"].str.contains("second wording").all()
