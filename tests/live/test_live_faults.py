"""The live pool under faults: a run rebuilt while it is read, the store gone for a while,
a writer killed mid-segment beside another still appending."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.export.collect import collect_export
from statepool_dagster.core.export.rows import ExportOptions
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run
from statepool_dagster.live import LivePool, PoolUnavailable

from process_helpers import REPO

SPEC = SampleSpec(n_runs=1, n_checkpoints=6, n_cards=4, emb_dim=4, episodes_per_batch=2)
OTHER = SampleSpec(n_runs=1, n_checkpoints=6, n_cards=6, emb_dim=4, episodes_per_batch=3)


def _python(code: str) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env)


def _pairs(runs: Path, store: Path) -> set[tuple[str, str]]:
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), "run000")
    rows = collect_export(store, ExportOptions(val_fraction=0.0)).rows
    return {(r.state, r.prompt) for r in rows}


def test_a_run_rebuilt_while_read_serves_its_old_or_new_rows_never_a_mix(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    generate_run(first / "run000", SPEC, 0)
    generate_run(second / "run000", OTHER, 1)
    valid = _pairs(first, tmp_path / "store_a") | _pairs(second, tmp_path / "store_b")
    store = tmp_path / "store"
    build_run(Settings(runs_dir=str(first), store_dir=str(store)), "run000")
    live = LivePool(store, refresh_seconds=0.0)
    writer = _python(f"""
        from statepool_dagster.core.config import Settings
        from statepool_dagster.core.stages import build_run
        for k in range(6):
            runs = {str(second)!r} if k % 2 == 0 else {str(first)!r}
            build_run(Settings(runs_dir=runs, store_dir={str(store)!r}), "run000")
    """)
    reads = 0
    try:
        while writer.poll() is None or reads == 0:
            live.refresh()
            for i in range(len(live)):
                row = live[i]
                pair = (row["extra_info"]["state"], row["prompt"][0]["content"])
                assert pair in valid, f"row {i} mixes two versions of run000"
                reads += 1
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0 and reads > 0
    live.refresh(force=True)
    now = {(r.state, r.prompt) for r in collect_export(store, ExportOptions(val_fraction=0)).rows}
    rows = [live[i] for i in range(len(live))]
    assert {(r["extra_info"]["state"], r["prompt"][0]["content"]) for r in rows} == now


def test_the_store_gone_for_a_while_keeps_serving_logs_once_and_catches_up(tmp_path, caplog):
    runs, store, away = tmp_path / "runs", tmp_path / "store", tmp_path / "away"
    generate_run(runs / "run000", SPEC, 0)
    generate_run(runs / "run001", SPEC, 1)
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), "run000")
    live = LivePool(store, refresh_seconds=0.0, stand_ins=True)
    plain = LivePool(store, refresh_seconds=0.0)
    served = live.state_ids()
    first = live[0]
    store.rename(away)
    with caplog.at_level(logging.WARNING, logger="statepool_dagster.live"):
        for _ in range(3):
            assert not live.refresh()
        assert live.state_ids() == served
        # The newest checkpoint's part was never opened: another state's row in its place,
        # saying so, when stand-ins were asked for; else an error naming the state.
        stand_in = {**first, "extra_info": {**first["extra_info"], "stand_in_for": served[-1]}}
        assert live[len(live) - 1] == stand_in
        assert live[len(live) - 1] == stand_in
    store_lines = [r for r in caplog.records if "store cannot be read" in r.getMessage()]
    row_lines = [r for r in caplog.records if "cannot be read now" in r.getMessage()]
    assert len(store_lines) == 1 and len(row_lines) == 2  # the store once, the state once
    with pytest.raises(PoolUnavailable, match=served[-1]):
        plain[len(plain) - 1]
    build_run(Settings(runs_dir=str(runs), store_dir=str(away)), "run001")
    away.rename(store)
    assert live.refresh()
    assert live.state_ids()[: len(served)] == served
    assert {s.rsplit("_ckpt", 1)[0] for s in live.state_ids()[len(served) :]} == {"run001"}
    assert live[1]["extra_info"]["state_id"] == served[1]


KILLED_WRITER = """
    import os, signal
    from statepool_dagster.core.sessions import StateWriter
    from store_helpers import generated_state
    writer = StateWriter({root!r}, "k", writer="a", max_records=2, max_age=3600)
    for k in range(5):
        writer.append(generated_state(100 + k), policy_step=k)
    os.kill(os.getpid(), signal.SIGKILL)
"""
OTHER_WRITER = """
    import sys, time
    from statepool_dagster.core.sessions import StateWriter
    from store_helpers import generated_state
    with StateWriter({root!r}, "k", writer="b", max_records=2, max_age=3600) as writer:
        for k in range(3):
            writer.append(generated_state(200 + k), policy_step=k)
            time.sleep(0.05)
"""


def _questions(live: LivePool) -> set[str]:
    rows = [live[i]["extra_info"]["state"] for i in range(len(live))]
    return {json.loads(state)["episodes"][0]["question"] for state in rows}


def test_a_writer_killed_mid_segment_loses_no_sealed_state_and_serves_no_unsealed_one(tmp_path):
    root, store = tmp_path / "sessions", tmp_path / "store"
    store.mkdir()
    env_path = str(REPO / "tests")
    killed = _python(f"import sys; sys.path.insert(0, {env_path!r})\n" + textwrap.dedent(
        KILLED_WRITER.format(root=str(root))))  # fmt: skip
    other = _python(f"import sys; sys.path.insert(0, {env_path!r})\n" + textwrap.dedent(
        OTHER_WRITER.format(root=str(root))))  # fmt: skip
    assert killed.wait(timeout=120) == -9
    assert other.wait(timeout=120) == 0
    names = sorted(p.name for p in (root / "k" / "segments").iterdir())
    assert [n for n in names if n.startswith(".a-")]  # the killed writer's unsealed tail
    live = LivePool(store, sessions=root)
    assert _questions(live) == {f"q{k}" for k in (100, 101, 102, 103, 200, 201, 202)}
    assert live.rejects == []


def test_a_served_segment_removed_leaves_and_its_place_still_answers(tmp_path):
    from statepool_dagster.core.sessions import StateWriter

    from store_helpers import generated_state

    root, store = tmp_path / "sessions", tmp_path / "store"
    store.mkdir()
    for writer, k in (("a", 1), ("b", 2)):
        with StateWriter(root, "s", writer=writer) as w:
            w.append(generated_state(k), policy_step=k)
    live = LivePool(store, sessions=root, refresh_seconds=0.0)
    helped = LivePool(store, sessions=root, refresh_seconds=0.0, stand_ins=True)
    assert len(live) == len(helped) == 2
    gone = live.state_id(1)
    (root / "s" / "segments" / "b-000000.jsonl").unlink()
    with pytest.raises(IndexError, match=f"state {gone} left the pool"):
        live[1]  # its line is gone: the pool looks again, and the state has left
    assert len(live) == 1 and live.rejects == []
    row = helped[1]  # asked for stand-ins: another state's row, saying so
    assert json.loads(row["extra_info"]["state"])["episodes"][0]["question"] == "q1"
    assert row["extra_info"]["stand_in_for"] == gone
    assert len(helped) == 1 and helped.rejects == []
