"""A rebuilt run reuses what did not change and still equals a build from nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.build import STAGES, RunJob, build_run
from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES, TABLE_INDEX
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

from helpers import store_pool

SPEC = SampleSpec(n_runs=1, n_checkpoints=5, n_cards=6, emb_dim=8, episodes_per_batch=3)
RUN = "run000"
ASSETS = (EPISODES, SNAPSHOTS, STATES, PROMPTS)


def build(runs: Path, store: Path, **settings) -> dict[str, object]:
    """Every stage for RUN; each stage's ``reused`` count."""
    reports = build_run(Settings(runs_dir=str(runs), store_dir=str(store), **settings), RUN)
    return {asset: report.reused for asset, report in reports.items()}


def assert_same_as_fresh(runs: Path, store: Path, tmp_path: Path, **settings) -> None:
    fresh = tmp_path / "fresh_store"
    build(runs, fresh, **settings)
    assert store_pool(store) == store_pool(fresh)
    for asset in ASSETS:
        ours = pq.read_table(store / asset / RUN)
        plain = pq.read_table(fresh / asset / RUN)
        columns = [c for c in plain.column_names if c != "file_stamp"]
        assert ours.schema.remove_metadata() == plain.schema.remove_metadata(), asset
        assert ours.select(columns).equals(plain.select(columns)), asset
    assert _rejects(store) == _rejects(fresh)


def _rejects(store: Path) -> list[str]:
    path = store / "rejects" / f"{RUN}.jsonl"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def run(tmp_path) -> Path:
    runs = tmp_path / "runs"
    generate_run(runs / RUN, SPEC, 0)
    return runs / RUN


@pytest.mark.parametrize("followup", ["none", "batch", "next_batch"])
@pytest.mark.parametrize("pairing", ["seed", "pre_curation"])
def test_grown_run_joins_and_renders_only_its_new_checkpoints(run, tmp_path, pairing, followup):
    store = tmp_path / "store"
    build(run.parent, store, pairing=pairing, followup=followup)
    states_before = pq.read_table(store / STATES / RUN).num_rows
    batches_before = len(list((store / EPISODES / RUN).glob("*.parquet")))
    append_checkpoint(run, SPEC, 0)
    reused = build(run.parent, store, pairing=pairing, followup=followup)
    assert reused[EPISODES] == batches_before  # only the appended lines' batch written
    assert reused[SNAPSHOTS] == SPEC.n_checkpoints
    # With the seed's pairing the last old state holds the newest library, so its reference
    # ops now diff against the new one: it is rebuilt too. pre_curation's states are not.
    rebuilt_old = 1 if pairing == "seed" else 0
    assert reused[STATES] == states_before - rebuilt_old
    assert reused[PROMPTS] == states_before  # a prompt never shows the reference ops
    assert_same_as_fresh(run.parent, store, tmp_path, pairing=pairing, followup=followup)


def test_unchanged_run_reuses_every_state_and_prompt(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    states = pq.read_table(store / STATES / RUN).num_rows
    reused = build(run.parent, store)
    assert reused[STATES] == reused[PROMPTS] == states
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_snapshot_rewritten_in_place_rebuilds_the_states_that_use_it(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    path = run / "snapshots" / "skills_v2.json"
    library = json.loads(path.read_text(encoding="utf-8"))
    library["cards"][0]["program"] = "Do the rewritten thing"
    path.write_text(json.dumps(library), encoding="utf-8")
    reused = build(run.parent, store)
    # State 2 holds library 2; state 1's reference ops diff library 1 against it.
    assert reused[STATES] == SPEC.n_checkpoints - 2
    state = json.loads((store / "state_pool" / RUN / f"{RUN}_ckpt2.json").read_text("utf-8"))
    assert state["lib_snapshot"]["cards"][0]["program"] == "Do the rewritten thing"
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_episode_edited_before_the_end_is_read_again_from_the_start(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    path = run / "episodes.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[1])
    record["response"] = "an edited answer"
    lines[1] = (json.dumps(record) + "\n").encode()
    path.write_bytes(b"".join(lines))
    batches = len(list((store / EPISODES / RUN).glob("*.parquet")))
    reused = build(run.parent, store)
    assert reused[EPISODES] == batches - 1  # every line parsed again, one batch written
    assert reused[STATES] == SPEC.n_checkpoints - 2  # states 0 and 1 both pair with batch 0
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_bad_lines_before_the_mark_stay_rejected_after_an_append(run, tmp_path):
    store = tmp_path / "store"
    path = run / "episodes.jsonl"
    with open(path, "ab") as f:
        f.write(b"{not json\n\n")
    build(run.parent, store)
    append_checkpoint(run, SPEC, 0)
    with open(path, "ab") as f:
        f.write(b"[1, 2]\n")
    reused = build(run.parent, store)
    assert reused[EPISODES] > 0
    rejects = [json.loads(line) for line in _rejects(store)]
    assert [r["error"].split(":")[0] for r in rejects] == [
        "not valid JSON",
        "not a JSON object (got list)",
    ]
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_line_still_being_written_is_read_again_once_complete(run, tmp_path):
    store = tmp_path / "store"
    path = run / "episodes.jsonl"
    line = json.loads(path.read_bytes().splitlines()[-1])
    text = json.dumps({**line, "id": "late-one"}).encode()
    with open(path, "ab") as f:
        f.write(text[:10])  # half a line, no newline yet
    build(run.parent, store)
    assert len(_rejects(store)) == 1
    with open(path, "ab") as f:
        f.write(text[10:] + b"\n")
    reused = build(run.parent, store)
    assert reused[EPISODES] > 0
    assert _rejects(store) == []
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_lost_index_falls_back_to_each_parts_own_footer(run, tmp_path):
    """After a kill -9 between a part and the index, the parts themselves are the truth."""
    store = tmp_path / "store"
    build(run.parent, store)
    for asset in ASSETS:
        (store / asset / RUN / TABLE_INDEX).unlink()
    reused = build(run.parent, store)
    assert reused[STATES] == reused[PROMPTS] == SPEC.n_checkpoints
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_part_of_another_build_is_rebuilt_not_reused(run, tmp_path):
    """A part whose key does not match its inputs (an older format, a hand edit) is redone."""
    store = tmp_path / "store"
    build(run.parent, store)
    part = store / STATES / RUN / "v0000000002.parquet"
    table = pq.read_table(part)
    meta = {**table.schema.metadata, b"statepool.key": b"stale"}
    pq.write_table(table.replace_schema_metadata(meta), part)
    reused = build(run.parent, store)
    assert reused[STATES] == SPEC.n_checkpoints - 1
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_states_built_alone_keep_the_originals_bytes(run, tmp_path):
    """Materializing checkpoint_states on its own (e.g. from the UI) over stored upstream parts."""
    store = tmp_path / "store"
    build(run.parent, store)
    shutil.rmtree(store / "state_pool")
    shutil.rmtree(store / STATES / RUN)
    job = RunJob(Settings(runs_dir=str(run.parent), store_dir=str(store)), RUN)
    STAGES[STATES](job)
    fresh = tmp_path / "fresh_store"
    build(run.parent, fresh)
    assert store_pool(store) == store_pool(fresh)


def test_a_new_checkpoint_writes_one_part_per_table_and_one_state_file(run, tmp_path):
    """Append-only: growth by one checkpoint leaves every older part's file untouched."""
    store = tmp_path / "store"
    build(run.parent, store, pairing="pre_curation")
    before = {p: p.stat().st_mtime_ns for p in store.rglob("v*.parquet")}
    files_before = {p: p.stat().st_mtime_ns for p in (store / "state_pool").rglob("*.json")}
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store, pairing="pre_curation")
    after = {p: p.stat().st_mtime_ns for p in store.rglob("v*.parquet")}
    assert {p: after[p] for p in before} == before
    assert len(after) - len(before) == 4
    files_after = {p: p.stat().st_mtime_ns for p in (store / "state_pool").rglob("*.json")}
    assert {p: files_after[p] for p in files_before} == files_before
    assert len(files_after) == len(files_before) + 1
