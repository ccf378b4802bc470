"""A trainer killed and resumed draws exactly what an uninterrupted run draws.

Real GRPO (TRL) on the live pool, on CPU, in trainer processes (tests/trainers/trl_resume_run.py):
one run uninterrupted; one SIGKILLed during step k and resumed from its checkpoint at step
c < k, states sealed while it was down. From step c + 1 on, both draw the same state ids
in the same order: none skipped, none drawn twice.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_trainers import _need

from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.live import LivePool
from statepool_dagster.live.versions import VersionGone
from statepool_dagster.trainers.cursor import CursorError, DrawOrder

from cli_helpers import cli_env, statepool
from store_helpers import generated_state

pytestmark = pytest.mark.trainer

RUNNER = Path(__file__).with_name("trl_resume_run.py")
VERL_RUNNER = Path(__file__).with_name("verl_resume_run.py")
SEALED = [501, 502]


@pytest.fixture(scope="module")
def synced(tokenized_store) -> SimpleNamespace:
    _need("trl", "torch")
    return tokenized_store


def _copy(synced, where: Path) -> SimpleNamespace:
    shutil.copytree(synced.store, where / "store")
    return SimpleNamespace(store=where / "store", sessions=where / "sessions")


def _run(where: Path, copy, runner: Path = RUNNER, **config) -> tuple[int, list[list], str]:
    draws = where / "draws.jsonl"
    config = {"store": str(copy.store), "sessions": str(copy.sessions),
              "tokenizer": str(config.pop("tokenizer")), "out": str(where / "out"),
              "draws": str(draws), **config}  # fmt: skip
    (where / "config.json").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, str(runner), str(where / "config.json")],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    lines = draws.read_text().splitlines() if draws.exists() else []
    return done.returncode, [json.loads(line) for line in lines], done.stderr


def test_a_grpo_run_killed_and_resumed_draws_what_the_uninterrupted_run_draws(synced, tmp_path):
    steps, c, k = 8, 4, 6
    a = tmp_path / "a"
    copy_a = _copy(synced, a)
    # The uninterrupted run's pool holds the sealed states from the first draw of step c + 1
    # on (its dataloader pulls one batch ahead of training, so they are sealed a step before).
    code, whole, err = _run(a, copy_a, tokenizer=synced.tokenizer, steps=steps,
                            seal_at=c - 2, seal=SEALED)  # fmt: skip
    assert code == 0, err[-3000:]
    assert len({s for s, _ in whole}) == steps

    b = tmp_path / "b"
    copy_b = _copy(synced, b)
    code, first, err = _run(b, copy_b, tokenizer=synced.tokenizer, steps=steps, kill_at=k - 1)
    assert code == -9, err[-3000:]  # SIGKILL during step k
    assert (b / "out" / f"checkpoint-{c}" / "statepool_cursor.json").is_file()
    with StateWriter(copy_b.sessions, "rollouts", writer="w") as writer:  # while it is down
        for n in SEALED:
            writer.append(generated_state(n), policy_step=c)
    (b / "draws.jsonl").unlink()
    code, resumed, err = _run(b, copy_b, tokenizer=synced.tokenizer, steps=steps,
                              resume=str(b / "out" / f"checkpoint-{c}"))  # fmt: skip
    assert code == 0, err[-3000:]

    before = [ids for s, ids in whole if s < c]
    assert before == [ids for s, ids in first if s < c]  # the same run up to the checkpoint
    after = [ids for s, ids in whole if s >= c]
    assert [ids for _, ids in resumed] == after
    assert {s for s, _ in resumed} == set(range(c, steps))
    assert not any(sid.startswith("s-") for ids in before for sid in ids)
    assert {sid for sid in after[0] if sid.startswith("s-")} == {
        sid for ids in after for sid in ids if sid.startswith("s-")
    }  # sealed while it was down: served first after the resume, as they would have been
    assert len(set(after[0])) == len(SEALED)


@pytest.mark.parametrize("mode", ["legacy", "v1"])
def test_verls_live_dataset_killed_and_resumed_draws_what_the_uninterrupted_run_draws(
    synced, tmp_path, mode
):
    _need("verl", "torchdata")
    steps, c, k = 9, 4, 6  # 6 states, 2 a step: the run crosses epochs

    def run(where: Path, copy, **config):
        return _run(where, copy, VERL_RUNNER, tokenizer=synced.tokenizer, steps=steps,
                    mode=mode, **config)  # fmt: skip

    a = tmp_path / "a"
    copy_a = _copy(synced, a)
    # Sealed where a kill after the checkpoint at step c would have left them: legacy saves
    # before step c's on_batch_end; v1's buffer refreshes before the save, so after it.
    seal_at = c if mode == "legacy" else c + 1
    code, whole, err = run(a, copy_a, seal_at=seal_at, seal=SEALED)
    assert code == 0, err[-3000:]

    b = tmp_path / "b"
    copy_b = _copy(synced, b)
    code, first, err = run(b, copy_b, kill_at=k)
    assert code == -9, err[-3000:]
    with StateWriter(copy_b.sessions, "rollouts", writer="w") as writer:  # while it is down
        for n in SEALED:
            writer.append(generated_state(n), policy_step=c)
    (b / "out" / "latest_checkpointed_iteration.txt").write_text(str(c))  # resume from step c
    (b / "draws.jsonl").unlink()
    code, resumed, err = run(b, copy_b)
    assert code == 0, err[-3000:]

    assert [ids for s, ids in whole if s <= c] == [ids for s, ids in first if s <= c]
    after = [ids for s, ids in whole if s > c]
    assert [ids for _, ids in resumed] == after
    assert [s for s, _ in resumed] == list(range(c + 1, steps + 1))
    first_new = after[0] if mode == "legacy" else after[1]  # v1 takes them in a step later
    assert set(first_new) == {sid for ids in after for sid in ids if sid.startswith("s-")}


def test_a_verl_checkpoints_lineage_is_what_its_dumps_name_up_to_its_step(synced, tmp_path):
    _need("verl", "torchdata")
    copy = _copy(synced, tmp_path)
    code, draws, err = _run(tmp_path, copy, VERL_RUNNER, tokenizer=synced.tokenizer, steps=6)
    assert code == 0, err[-3000:]
    dumps = tmp_path / "rollout_data"  # verl's trainer.rollout_data_dir: {step}.jsonl
    dumps.mkdir()
    for step, ids in draws:
        lines = [{"input": sid, "output": "[]", "score": float(n), "step": step, "state_id": sid}
                 for n, sid in enumerate(ids)]  # fmt: skip
        (dumps / f"{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    env = cli_env(SimpleNamespace(runs=tmp_path / "runs", store=copy.store), tmp_path / "home")
    statepool(env, tmp_path, "feedback", "--from-verl-dump", str(dumps))

    checkpoint = tmp_path / "out" / "global_step_4"
    report = json.loads(statepool(env, tmp_path, "lineage", str(checkpoint), "--json").stdout)
    assert (report["trainer"], report["step"], report["draws"]) == ("verl", 4, None)
    drawn = [sid for step, ids in draws if step <= 4 for sid in ids]
    states = {s["state_id"]: s for s in report["states"]}
    assert set(states) == set(drawn)
    for sid, state in states.items():
        assert state["rewards"]["count"] == drawn.count(sid)
        assert state["rewards"]["first_step"] == next(st for st, ids in draws if sid in ids)
        assert state["source"]["run"] == sid.rsplit("_", 1)[0]
    assert report["feedback"]["left_out"] == {"after the checkpoint": 2 * (len(draws) - 4)}
    assert "data.pt" in report["drawn_from"] and "step ≤ 4" in report["drawn_from"]
    latest = statepool(env, tmp_path, "lineage", str(tmp_path / "out"), "--json").stdout
    assert json.loads(latest)["step"] == 6  # the folder of latest_checkpointed_iteration.txt


def test_a_cursor_is_refused_when_damaged_or_of_another_store(synced, tmp_path):
    copy = _copy(synced, tmp_path)
    pool = LivePool(copy.store)
    order = DrawOrder(pool, weighted=False, seed=0)
    for _ in range(5):
        order.next()
    state = order.state_dict(3)
    again = LivePool(copy.store, as_of=state["version"])
    resumed = DrawOrder.resumed(again, False, 0, state)
    assert [resumed.next() for _ in range(4)] == [order_next for order_next in _after(pool, 3, 4)]
    with pytest.raises(CursorError, match="damaged"):
        DrawOrder.resumed(again, False, 0, {**state, "cursor": state["cursor"] + 1})
    other = shutil.copytree(copy.store, tmp_path / "other")
    with pytest.raises(CursorError, match="of the store"):
        DrawOrder.resumed(LivePool(other, as_of=state["version"]), False, 0, state)
    with pytest.raises(VersionGone, match="STATEPOOL_KEEP_VERSIONS"):
        LivePool(copy.store, as_of="0000000000000-0123456789abcdef")


def _after(pool, drawn: int, n: int) -> list[int]:
    fresh = DrawOrder(pool, weighted=False, seed=0)
    out = [fresh.next() for _ in range(drawn + n)]
    return out[drawn:]
