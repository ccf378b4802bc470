"""Sessions in the core: writers, session.json, bad lines, identity, prompts as the run path's."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pyarrow as pa
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.export.sessions import iter_session_table
from statepool_dagster.core.names import PROMPTS
from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.sessions import SessionSpecMismatch, StateWriter
from statepool_dagster.core.sessions.build import build_session
from statepool_dagster.core.sessions.layout import segments_dir, stored_sessions
from statepool_dagster.core.stages.run import build_run
from statepool_dagster.core.states.models import CheckpointState
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.reading import read_run_table
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs
from statepool_dagster.readers import load_state_pool

_FORK = multiprocessing.get_context("fork")


def _state(k: int, **changes) -> dict:
    state = {
        "state_id": f"rollout-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": []},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}"}],
        "analysis": None,
        "last_receipt": "(online)",
        "followup_qids": [],
        "gt_map": {},
    }
    return {**state, **changes}


def _ids(store: Path, session: str, which: str = "states") -> list[str]:
    batches = list(iter_session_table(store, session, which, ["state_id"]))
    return [i for b in batches for i in b.column("state_id").to_pylist()]


def test_a_written_session_builds_states_and_prompts(tmp_path: Path) -> None:
    root, store = tmp_path / "sessions", tmp_path / "store"
    with StateWriter(root, "s1", spec={"model": "m"}, writer="w0") as w:
        for k in range(3):
            w.append(
                _state(k), policy_step=k, parent_state_id=None if k == 0 else f"rollout-{k - 1}"
            )
    spec = Settings.from_env(environ={}).prompt_spec()
    built = build_session(root, store, "s1", spec)
    assert (built.segments, built.states, built.unique, built.prompts, built.rejects) == (
        1,
        3,
        3,
        3,
        0,
    )
    assert built.policy_steps == (0, 2) and built.writers == ["w0"]
    assert len(_ids(store, "s1")) == 3 and len(_ids(store, "s1", "prompts")) == 3
    again = build_session(root, store, "s1", spec)
    assert again.built == [], "a sealed segment already built is not read again"
    assert json.loads((root / "s1" / "session.json").read_text()) == {"model": "m"}
    assert stored_sessions(store) == ["s1"]


def test_a_second_writer_with_a_different_spec_is_refused(tmp_path: Path) -> None:
    StateWriter(tmp_path, "s", spec={"model": "a"}).close()
    StateWriter(tmp_path, "s", spec={"model": "a"}).close()
    StateWriter(tmp_path, "s").close()
    with pytest.raises(SessionSpecMismatch, match="different spec"):
        StateWriter(tmp_path, "s", spec={"model": "b"})


@pytest.mark.parametrize("name", ["", "../x", "a/b", "c,d", ".hidden", "x" * 201])
def test_session_names_follow_the_run_name_rules(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="invalid session name"):
        StateWriter(tmp_path, name)


def test_bad_lines_are_rejects_naming_segment_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "s" / "segments"
    folder.mkdir(parents=True)
    good = json.dumps(_state(1)).encode()
    lines = [
        good,
        b"not json",
        json.dumps({k: v for k, v in _state(2).items() if k != "dataset"}).encode(),
        json.dumps({**_state(3), "extra": 1}).encode(),
        json.dumps(_state(4, dataset=7)).encode(),
        json.dumps(_state(5, episodes=[1, 2])).encode(),
        b"[" * 600 + b"]" * 600,
        json.dumps(_state(6, last_receipt="\ud800")).encode(),
        b'{"state_id": "\xff"}',
        json.dumps(_state(7, lib_snapshot={"cards": [{"card_id": 1}]})).encode(),
        b"[1]",
    ]
    (folder / "w-000000.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    built = build_session(tmp_path / "sessions", tmp_path / "store", "s", Settings().prompt_spec())
    details = "\n".join(built.reject_details)
    assert built.states == 2 and built.prompts == 1
    for line, said in [
        (2, "not valid JSON"),
        (3, "missing field 'dataset'"),
        (4, "unknown field 'extra'"),
        (5, "field dataset"),
        (6, "field episodes.0"),
        (7, "nested 600 levels deep"),
        (8, "not storable as UTF-8"),
        (9, "not storable as UTF-8"),
        (10, "cannot render the prompt"),
        (11, "not a state"),
    ]:
        assert f"s/segments/w-000000.jsonl line {line}: " in details
        assert said in next(d for d in built.reject_details if f"line {line}:" in d)
    stored = (tmp_path / "store" / "session_rejects" / "s" / "w-000000.jsonl").read_text()
    assert len(stored.splitlines()) == 10


def test_one_state_from_two_writers_is_one_state_with_two_provenances(tmp_path: Path) -> None:
    root, store = tmp_path / "sessions", tmp_path / "store"
    for writer, written_id in (("a", "x-1"), ("b", "y-9")):
        with StateWriter(root, "s", writer=writer) as w:
            w.append(_state(1, state_id=written_id), policy_step=4, meta={"by": writer})
    build_session(root, store, "s", Settings().prompt_spec())
    ids = _ids(store, "s")
    assert len(ids) == 1 and ids[0].startswith("s-")
    batches = list(iter_session_table(store, "s", "prompts", ["state_id"]))
    assert sum(b.num_rows for b in batches) == 1
    import pyarrow.parquet as pq

    rows = pa.concat_tables(
        pq.read_table(p) for p in sorted((store / "session_states" / "s").glob("*.parquet"))
    ).to_pylist()
    assert [(r["writer"], r["written_state_id"], r["policy_step"]) for r in rows] == [
        ("a", "x-1", 4),
        ("b", "y-9", 4),
    ]
    assert [json.loads(r["meta"]) for r in rows] == [{"by": "a"}, {"by": "b"}]


def test_prompts_are_byte_identical_to_the_run_path_for_the_same_state(tmp_path: Path) -> None:
    runs, store = tmp_path / "runs", tmp_path / "store"
    generate_runs(runs, SampleSpec(n_runs=1, n_checkpoints=3))
    run = sorted(p.name for p in runs.iterdir())[0]
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    build_run(settings, run)
    states = load_state_pool(store)
    run_prompts = read_run_table(StoreLayout(store), PROMPTS, run, ["state_id", "prompt"])
    by_id = dict(
        zip(*(run_prompts.column(c).to_pylist() for c in ("state_id", "prompt")), strict=True)
    )
    root = tmp_path / "sessions"
    with StateWriter(root, "s") as w:
        for state in states:
            w.append(state, policy_step=0)
    build_session(root, store, "s", settings.prompt_spec())
    batches = list(iter_session_table(store, "s", "prompts", ["state_id", "prompt"]))
    session = {
        i: p
        for b in batches
        for i, p in zip(b["state_id"].to_pylist(), b["prompt"].to_pylist(), strict=True)
    }
    assert set(session) == set(by_id), "run-path ids are kept"
    assert all(session[i].encode() == by_id[i].encode() for i in by_id)
    stored = [
        CheckpointState.from_json(t)
        for b in iter_session_table(store, "s", "states", ["state"])
        for t in b["state"].to_pylist()
    ]
    assert [s.to_json() for s in stored] == [s.to_json() for s in states]


def _worker(root: str, writer: str, count: int, pause: float) -> None:
    with StateWriter(root, "live", writer=writer, max_records=5, max_age=3600) as w:
        for k in range(count):
            w.append(_state(k, state_id=f"{writer}-{k}", last_receipt=writer), policy_step=k)
            time.sleep(pause)


def test_writer_processes_one_killed_nothing_sealed_lost_no_duplicate(tmp_path: Path) -> None:
    root, store = tmp_path / "sessions", tmp_path / "store"
    procs = [_FORK.Process(target=_worker, args=(str(root), f"w{k}", 40, 0.0)) for k in range(3)]
    doomed = _FORK.Process(target=_worker, args=(str(root), "doomed", 10_000, 0.002))
    for p in [*procs, doomed]:
        p.start()
    folder = segments_dir(root, "live")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len([s for s in list_segments(folder) if s.writer == "doomed"]) >= 2 and list(
            folder.glob(".doomed-*")
        ):
            break
        time.sleep(0.01)
    os.kill(doomed.pid, signal.SIGKILL)
    for p in [*procs, doomed]:
        p.join()
    built = build_session(root, store, "live", Settings().prompt_spec())
    doomed_sealed = sum(1 for s in list_segments(folder) if s.writer == "doomed")
    assert built.rejects == 0
    assert built.states == built.unique == 3 * 40 + 5 * doomed_sealed
    assert len(_ids(store, "live")) == built.unique
    assert len(set(_ids(store, "live", "prompts"))) == built.unique


def test_a_session_on_an_object_store_url_end_to_end() -> None:
    import uuid

    base = f"memory://sessions-{uuid.uuid4().hex}"
    root, store = f"{base}/sessions", f"{base}/store"
    with StateWriter(root, "obj", spec={"model": "m"}, writer="w", max_records=2) as w:
        for k in range(5):
            w.append(_state(k), policy_step=k)
    spec = Settings().prompt_spec()
    built = build_session(root, store, "obj", spec)
    assert (built.segments, built.unique, built.prompts) == (3, 5, 5)
    assert len(_ids(store, "obj")) == 5 and len(_ids(store, "obj", "prompts")) == 5
    with StateWriter(root, "obj", writer="w") as w:
        w.append(_state(9), policy_step=9)
    grown = build_session(root, store, "obj", spec)
    assert grown.built == ["w-000003.jsonl"] and grown.unique == 6


def test_a_deleted_segment_leaves_the_store_a_deleted_session_does_not(tmp_path: Path) -> None:
    import shutil

    root, store = tmp_path / "sessions", tmp_path / "store"
    for writer in ("a", "b"):
        with StateWriter(root, "s", writer=writer) as w:
            w.append(_state(1 if writer == "a" else 2), policy_step=0)
    spec = Settings().prompt_spec()
    assert build_session(root, store, "s", spec).unique == 2
    (root / "s" / "segments" / "b-000000.jsonl").unlink()
    pruned = build_session(root, store, "s", spec)
    assert pruned.dropped == ["b-000000.jsonl"] and pruned.unique == 1
    assert not (store / "session_prompts" / "s" / "b-000000.parquet").exists()
    shutil.rmtree(root / "s")
    kept = build_session(root, store, "s", spec)
    assert kept.missing and kept.unique == 1 and len(_ids(store, "s")) == 1


def test_a_replayed_segment_adds_provenance_not_states(tmp_path: Path) -> None:
    root, store = tmp_path / "sessions", tmp_path / "store"
    with StateWriter(root, "s", writer="a") as w:
        for k in range(3):
            w.append(_state(k), policy_step=k)
    data = (root / "s" / "segments" / "a-000000.jsonl").read_bytes()
    (root / "s" / "segments" / "a-000001.jsonl").write_bytes(data)  # replayed under a new number
    built = build_session(root, store, "s", Settings().prompt_spec())
    assert (built.states, built.segments) == (6, 2)
    assert len(_ids(store, "s")) == 3 and len(_ids(store, "s", "prompts")) == 3


def _peak_build(tmp_path: Path, states: int) -> int:
    import tracemalloc

    root, store = tmp_path / f"sessions{states}", tmp_path / f"store{states}"
    with StateWriter(root, "big", writer="w", max_bytes=1 << 40) as w:
        for k in range(states):
            w.append(_state(k, last_receipt="x" * 200_000), policy_step=k)
    spec = Settings().prompt_spec()
    tracemalloc.start()
    try:
        built = build_session(root, store, "big", spec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert built.unique == states
    return peak


def test_a_segment_is_built_with_memory_flat_in_its_states(tmp_path, monkeypatch) -> None:
    from statepool_dagster.core.sessions import store

    monkeypatch.setattr(store, "_BATCH_CHARS", 2 << 20)  # row groups of 2 MB of state text
    small, large = _peak_build(tmp_path, 20), _peak_build(tmp_path, 120)
    assert large < 1.5 * small, (small, large)
    assert large < 12 * 200_000 + (2 << 20) * 2
