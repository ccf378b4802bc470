"""The live pool: the rows `statepool export --format verl` writes, sealed segments served
before Dagster stores them, the selection decided per state, bad segment lines kept aside."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.export.collect import collect_export
from statepool_dagster.core.export.formats import verl_record
from statepool_dagster.core.export.rows import ExportOptions
from statepool_dagster.core.feedback.select import Selection, SelectionOptions
from statepool_dagster.core.feedback.stats_store import update_stats
from statepool_dagster.core.segments.writer import SegmentWriter
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run, generate_runs
from statepool_dagster.live import LivePool

from cli_helpers import cli_env, statepool
from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
OPTIONS = ExportOptions(val_fraction=0.0)


def _build(root: Path) -> SimpleNamespace:
    """Runs ``run000``, ``run001`` and ``run002`` (a copy of run000: its states are
    duplicates); sessions ``alpha`` (a run state's id, a run state's content, new states,
    a bad line) and ``beta`` (one of alpha's states, one new), both stored."""
    runs, store, sessions = root / "runs", root / "store", root / "sessions"
    generate_runs(runs, SPEC)
    shutil.copytree(runs / "run000", runs / "run002")
    settings = Settings(runs_dir=str(runs), store_dir=str(store), sessions_dir=str(sessions))
    for run in ("run000", "run001", "run002"):
        build_run(settings, run)
    pool = store / "state_pool"
    same_id = json.loads((pool / "run000" / "run000_ckpt1.json").read_text("utf-8"))
    same_content = json.loads((pool / "run001" / "run001_ckpt0.json").read_text("utf-8"))
    same_content["state_id"] = "written-elsewhere"
    with StateWriter(sessions, "alpha", writer="w") as writer:
        writer.append(same_id, policy_step=1)
        writer.append(same_content, policy_step=1)
        for k in range(1, 5):
            writer.append(generated_state(k), policy_step=k)
    bad = json.dumps(generated_state(9)) + "\n" + '{"state_id": "half"\n'
    (sessions / "alpha" / "segments" / "x-000000.jsonl").write_text(bad)
    with StateWriter(sessions, "beta", writer="w") as writer:
        writer.append(generated_state(4), policy_step=7)
        writer.append(generated_state(20), policy_step=7)
    for session in ("alpha", "beta"):
        build_session(sessions, store, session, settings.prompt_spec())
    return SimpleNamespace(runs=runs, store=store, sessions=sessions, settings=settings)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> SimpleNamespace:
    return _build(tmp_path_factory.mktemp("live"))


@pytest.fixture
def pool(built, tmp_path, monkeypatch) -> SimpleNamespace:
    """A copy of the built store and sessions this test may change."""
    store, sessions = tmp_path / "store", tmp_path / "sessions"
    shutil.copytree(built.store, store)
    shutil.copytree(built.sessions, sessions)
    monkeypatch.setenv("STATEPOOL_SESSIONS_DIR", str(sessions))
    return SimpleNamespace(
        runs=built.runs, store=store, sessions=sessions, settings=built.settings, root=tmp_path
    )


def _feedback(store: Path, scores: dict[str, list[list[float]]]) -> None:
    """Groups of answers per state, recorded as a trainer would, then folded."""
    folder = store / "feedback"
    now = time.time()
    with SegmentWriter(folder, "w") as writer:
        for sid, groups in scores.items():
            for g, group in enumerate(groups):
                for score in group:
                    writer.append({"state_id": sid, "score": score, "group": f"{sid}-{g}-{now}",
                                   "time": now, "source": "trl",
                                   "ops_match": int(score > 0.5)})  # fmt: skip
    update_stats(store, folder)


def _rows(live: LivePool) -> dict[str, dict]:
    rows = [live[i] for i in range(len(live))]
    return {row["extra_info"]["state_id"]: row for row in rows}


def _export(store: Path, selection: Selection | None = None) -> dict[str, dict]:
    export = collect_export(store, OPTIONS, selection=selection)
    flags = (export.with_sessions, export.weighted)
    return {r.state_id: verl_record(r, *flags) for r in export.rows}


def test_rows_are_the_verl_exports_rows_with_duplicates_sessions_and_weights(pool):
    flat = "run000_ckpt0"
    session_state = next(r.state_id for r in collect_export(pool.store, OPTIONS).rows if r.session)
    _feedback(pool.store, {flat: [[1.0, 1.0], [0.0, 0.0]], session_state: [[0.0, 1.0]]})
    env = cli_env(SimpleNamespace(runs=pool.runs, store=pool.store), pool.root / "home")
    statepool(env, pool.root, "export", "--format", "verl", "--out", "verl", "--val-fraction",
              "0", "--drop-zero-variance", "2", "--weight", "std")  # fmt: skip
    exported = pq.read_table(pool.root / "verl" / "train.parquet").to_pylist()
    options = SelectionOptions(drop_zero_variance=2, weight="std")
    live = LivePool(pool.store, sessions=pool.sessions, options=options)
    served = _rows(live)
    assert served == {row["extra_info"]["state_id"]: row for row in exported}
    assert flat not in served and not any(s.startswith("run002") for s in served)
    selection = Selection.from_options(options, pool.store)
    assert served[session_state]["weight"] == selection.decide(session_state).weight
    assert served[session_state]["weight"] != served["run000_ckpt1"]["weight"]  # seen, unseen
    assert live.state_ids() == [live.state_id(i) for i in range(len(live))]
    assert [live.weight(i) for i in range(len(live))] == [
        served[s]["weight"] for s in live.state_ids()
    ]
    assert live.rejects == []  # alpha's bad line: the store's session_rejects hold it


def test_a_split_serves_the_exports_split(pool):
    options = ExportOptions(val_fraction=0.5, seed=3)
    export = collect_export(pool.store, options)
    flags = (export.with_sessions, export.weighted)
    val = {r.state_id: verl_record(r, *flags) for r in export.rows if r.split == "val"}
    assert val and len(val) < len(export.rows)
    live = LivePool(pool.store, split="val", val_fraction=0.5, seed=3)
    assert _rows(live) == val


def test_a_sealed_segment_is_served_before_dagster_then_from_the_store_in_place(pool):
    live = LivePool(pool.store, sessions=pool.sessions, refresh_seconds=0.0)
    before = live.state_ids()
    run_copy = json.loads((pool.store / "state_pool" / "run001" / "run001_ckpt1.json").read_text())
    run_copy["state_id"] = "elsewhere-again"
    with StateWriter(pool.sessions, "beta", writer="v") as writer:
        writer.append(generated_state(30), policy_step=8)
        writer.append(generated_state(1), policy_step=8)  # alpha has it
        writer.append(run_copy, policy_step=8)  # a run state's content
        writer.append(generated_state(31), policy_step=9)
    assert live.refresh()
    assert live.state_ids()[: len(before)] == before  # served states keep their places
    new = live.state_ids()[len(before) :]
    assert len(new) == 2
    early = {sid: live[live.state_ids().index(sid)] for sid in new}
    build_session(pool.sessions, pool.store, "beta", pool.settings.prompt_spec())
    stored = pq.read_table(pool.store / "session_prompts" / "beta" / "v-000000.parquet")
    prompts = dict(zip(stored["state_id"].to_pylist(), stored["prompt"].to_pylist(), strict=True))
    assert {sid: row["prompt"][0]["content"] for sid, row in early.items()} == {
        sid: prompts[sid] for sid in new
    }
    assert early == {sid: _export(pool.store)[sid] for sid in new}  # before and after Dagster
    assert not live.refresh()  # the same states, now read from the store
    assert live.state_ids() == before + new  # no state twice, none moved
    (pool.sessions / "beta" / "segments" / "v-000000.jsonl").unlink()  # read from the store now
    assert _rows(live) == _export(pool.store)


def test_bad_torn_replayed_and_unsealed_segments_are_never_served(pool):
    live = LivePool(pool.store, sessions=pool.sessions, refresh_seconds=0.0)
    served = set(live.state_ids())
    folder = pool.sessions / "gamma" / "segments"
    folder.mkdir(parents=True)
    good = json.dumps(generated_state(40))
    not_a_state = json.dumps({"state_id": "x", "dataset": 3})
    (folder / "a-000000.jsonl").write_text(f"{good}\n{not_a_state}\n\xff\n")
    (folder / "a-000001.jsonl").write_text(f"{good}\n")  # replayed under a new number
    torn = json.dumps(generated_state(41))
    (folder / "b-000000.jsonl").write_text(json.dumps(generated_state(42)) + "\n" + torn[:30])
    (folder / ".c-000000.jsonl.open-123").write_text(json.dumps(generated_state(43)) + "\n")
    live.refresh()
    new = set(live.state_ids()) - served
    rows = {live[live.state_ids().index(s)]["extra_info"]["state_id"] for s in new}
    assert len(new) == 2 and rows == new
    states = {json.loads(live[live.state_ids().index(s)]["extra_info"]["state"])["episodes"][0]
              ["question"] for s in new}  # fmt: skip
    assert states == {"q40", "q42"}
    where = {(r.file, r.line) for r in live.rejects}
    assert {("gamma/segments/a-000000.jsonl", 2), ("gamma/segments/b-000000.jsonl", 2)} <= where
    assert all(r.error for r in live.rejects)
    assert len(live.rejects) == 3  # a's two, b's torn one


def test_a_fold_decides_again_only_the_states_whose_stats_changed(pool):
    options = SelectionOptions(drop_zero_variance=1, weight="std")
    live = LivePool(pool.store, options=options, refresh_seconds=0.0)
    before = live.state_ids()
    weights = dict(zip(before, [live.weight(i) for i in range(len(live))], strict=True))
    flat, spread = before[2], before[4]
    _feedback(pool.store, {flat: [[1.0, 1.0]], spread: [[0.0, 1.0]]})
    assert live.refresh()
    assert live.state_ids() == [s for s in before if s != flat]
    after = dict(zip(live.state_ids(), [live.weight(i) for i in range(len(live))], strict=True))
    selection = Selection.from_options(options, pool.store)
    assert after[spread] == selection.decide(spread).weight != weights[spread]
    assert {s: w for s, w in after.items() if s != spread} == {
        s: w for s, w in weights.items() if s not in (flat, spread)
    }
    assert _rows(live) == _export(pool.store, selection)


def test_a_new_run_comes_after_the_served_states_and_a_removed_one_leaves(pool):
    live = LivePool(pool.store, refresh_seconds=0.0)
    before = live.state_ids()
    assert not live.refresh()
    generate_runs(pool.root / "more", SampleSpec(n_runs=4, n_checkpoints=2, n_cards=3,
                                                 emb_dim=4, episodes_per_batch=2))  # fmt: skip
    settings = Settings(runs_dir=str(pool.root / "more"), store_dir=str(pool.store))
    build_run(settings, "run003")
    assert live.refresh()
    assert live.state_ids()[: len(before)] == before
    assert {s.rsplit("_ckpt", 1)[0] for s in live.state_ids()[len(before) :]} == {"run003"}
    assert _rows(live) == _export(pool.store)
    shutil.rmtree(pool.store / "curator_prompts" / "run001")
    assert live.refresh()
    assert not any(s.startswith("run001") for s in live.state_ids())
    assert _rows(live) == _export(pool.store)


def test_through_fsspec_the_pool_is_the_same_and_sees_a_sealed_segment(pool):
    local = LivePool(pool.store, sessions=pool.sessions)
    url = LivePool(f"local://{pool.store}", sessions=f"local://{pool.sessions}",
                   refresh_seconds=0.0)  # fmt: skip
    assert url.state_ids() == local.state_ids()
    assert _rows(url) == _rows(local)
    assert not url.refresh()
    with StateWriter(pool.sessions, "beta", writer="z") as writer:
        writer.append(generated_state(77), policy_step=3)
    assert url.refresh()
    assert url.state_ids()[:-1] == local.state_ids()
    assert url[len(url) - 1]["extra_info"]["session"] == "beta"


def test_a_grown_run_keeps_its_places_and_its_new_checkpoint_comes_last(pool, tmp_path):
    runs = tmp_path / "grown"
    spec = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
    generate_run(runs / "run009", spec, 9)
    settings = Settings(runs_dir=str(runs), store_dir=str(pool.store))
    build_run(settings, "run009")
    live = LivePool(pool.store, refresh_seconds=0.0)
    before = live.state_ids()
    assert {f"run009_ckpt{k}" for k in range(3)} <= set(before)
    last = live[before.index("run009_ckpt2")]["extra_info"]
    assert not last["has_reference_ops"]  # no next library yet
    shutil.rmtree(runs / "run009")
    generate_run(runs / "run009", SampleSpec(**{**spec.__dict__, "n_checkpoints": 4}), 9)
    build_run(settings, "run009")
    assert live.refresh()
    assert live.state_ids()[: len(before)] == before
    assert live.state_ids()[len(before) :] == ["run009_ckpt3"]
    assert live[before.index("run009_ckpt2")]["extra_info"]["has_reference_ops"]
    assert _rows(live) == _export(pool.store)


def test_a_difficulty_band_and_pass_rate_weights_select_as_the_export_does(pool):
    served = LivePool(pool.store).state_ids()
    easy, hard, middle = served[0], served[1], served[-1]
    _feedback(pool.store, {easy: [[1.0, 1.0, 1.0]], hard: [[0.0, 0.0]], middle: [[0.0, 1.0]]})
    options = SelectionOptions(difficulty_band=(0.2, 0.8), weight="pass-rate")
    live = LivePool(pool.store, options=options)
    assert easy not in live.state_ids() and hard not in live.state_ids()
    selection = Selection.from_options(options, pool.store)
    weight = live.weight(live.state_ids().index(middle))
    assert weight is not None and weight == selection.decide(middle).weight
    assert _rows(live) == _export(pool.store, selection)
