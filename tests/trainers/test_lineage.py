"""``statepool lineage``: what a trainer checkpoint trained on, from its cursor and the feedback
records, never from a log of its own; bad checkpoints refused in one line.

The checkpoints are made by the live stream's own code (``DrawOrder`` drawing from a
``LivePool``, its cursor saved as ``LivePoolCheckpoint`` saves it), the feedback by the
recorder the reward functions use. verl's ``data.pt`` from its real loop:
tests/trainers/test_resume.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.feedback.recorder import FeedbackRecorder
from statepool_dagster.core.feedback.records import from_breakdown
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run, generate_runs
from statepool_dagster.live import LivePool
from statepool_dagster.live.versions import versions_folder
from statepool_dagster.trainers.cursor import DrawOrder
from statepool_dagster.trainers.trl import CURSOR_FILE, _save_cursor

from cli_helpers import STATEPOOL, cli_env
from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=3, emb_dim=2, episodes_per_batch=1)


@pytest.fixture
def pool(tmp_path) -> SimpleNamespace:
    """Two built runs and a session with one sealed state (not stored by Dagster yet)."""
    runs, store, sessions = tmp_path / "runs", tmp_path / "store", tmp_path / "sessions"
    generate_runs(runs, SPEC)
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for run in ("run000", "run001"):
        build_run(settings, run)
    with StateWriter(sessions, "rollouts", writer="w1") as writer:
        writer.append(generated_state(7), policy_step=5)
    return SimpleNamespace(root=tmp_path, runs=runs, store=store, sessions=sessions)


def checkpoint(pool, name: str, drawn: int, pulled: int, seed: int = 0) -> tuple[Path, list]:
    """A TRL checkpoint folder whose cursor is at ``drawn`` draws (the stream pulled
    ``pulled``, as TRL's dataloader runs ahead); the ids drawn, in order."""
    order = DrawOrder(LivePool(pool.store, pool.sessions), weighted=False, seed=seed)
    ids = [order.pool.state_id(order.next()) for _ in range(pulled)]
    folder = pool.root / "out" / name
    folder.mkdir(parents=True)
    _save_cursor(folder, order.state_dict(drawn))
    return folder, ids[:drawn]


def record(pool, *rows: tuple[str, float, int | None, str]) -> None:
    """Feedback records ``(state id, score, step, source)`` sealed as a reward worker seals them."""
    recorder = FeedbackRecorder(str(pool.store / "feedback"))
    now = time.time()
    recorder.record(
        from_breakdown(
            sid, {"score": score}, group=f"{sid}/{step}", time=now, source=source, step=step
        )
        for sid, score, step, source in rows
    )
    recorder.close()


def lineage(pool, *args: str) -> subprocess.CompletedProcess:
    where = SimpleNamespace(runs=pool.runs, store=pool.store)
    env = {**cli_env(where, pool.root / "home"), "STATEPOOL_SESSIONS_DIR": str(pool.sessions)}
    return subprocess.run(
        [str(STATEPOOL), "lineage", *args],
        env=env,
        cwd=pool.root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def refused(done: subprocess.CompletedProcess, *names: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("statepool lineage: "), lines[0]
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def test_a_trl_checkpoint_lists_the_states_its_cursor_served_with_sources_and_rewards(pool):
    folder, drawn = checkpoint(pool, "checkpoint-3", drawn=7, pulled=8)
    session_state = drawn[-1]  # never-served states come first, the session's last of them
    record(
        pool,
        (drawn[0], 1.0, 0, "trl"),
        (drawn[0], 0.0, 1, "trl"),
        (session_state, 0.5, 2, "trl"),
        (drawn[1], 1.0, 3, "trl"),  # step 4's reward call: after the checkpoint
        (drawn[1], 1.0, None, "trl"),  # no trainer state given: no step
        (drawn[2], 1.0, 0, "verl-dump"),  # another trainer's
    )
    done = lineage(pool, str(folder), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["trainer"], report["step"], report["draws"]) == ("trl", 3, 7)
    assert report["store"] == str(pool.store)
    assert [s["state_id"] for s in report["states"]] == drawn  # the version's order
    states = {s["state_id"]: s for s in report["states"]}
    assert states[drawn[0]]["source"] == {"run": "run000", "checkpoint": 0}
    assert states[drawn[0]]["rewards"] == {"count": 2, "mean": 0.5, "first_step": 0, "last_step": 1}
    assert states[session_state]["source"] == {
        "session": "rollouts",
        "writer": "w1",
        "policy_step": 5,
        "segment": "w1-000000.jsonl",
        "line": 1,
    }
    assert states[session_state]["rewards"]["count"] == 1
    assert (states[drawn[1]]["rewards"]["count"], states[drawn[1]]["rewards"]["mean"]) == (0, None)
    assert report["feedback"]["left_out"] == {
        "after the checkpoint": 1,
        "with no step": 1,
        "of another source": 1,
    }
    assert "cursor" in report["drawn_from"] and report["version"] in report["drawn_from"]
    assert "step < 3" in report["rewards_from"]


def test_the_text_lineage_says_its_evidence_and_gives_a_row_per_state(pool):
    folder, drawn = checkpoint(pool, "checkpoint-2", drawn=3, pulled=4)
    record(pool, (drawn[0], 1.0, 0, "trl"), (drawn[0], 0.5, 1, "trl"))
    done = lineage(pool, str(folder))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{folder}: TRL, step 2, pool version ")
    assert lines[1].startswith("drawn: 3 states in 3 draws, from the cursor")
    assert lines[2].startswith("rewards: 2 records counted, from the feedback records in")
    rows = {line.split()[0]: line for line in lines[4:]}
    assert set(rows) == {"state", *drawn}
    assert "run run000, checkpoint 0" in rows[drawn[0]] and "0.750" in rows[drawn[0]]


def test_two_trainers_on_one_pool_each_get_their_own_lineage(pool):
    first, drawn_first = checkpoint(pool, "a/checkpoint-1", drawn=2, pulled=2)
    second, drawn_second = checkpoint(pool, "b/checkpoint-1", drawn=5, pulled=5)
    record(pool, *[(sid, 1.0, 0, "trl") for sid in drawn_second])
    report = json.loads(lineage(pool, str(first), "--json").stdout)
    assert [s["state_id"] for s in report["states"]] == drawn_first
    # the other trainer's records for states this one never drew are named, not counted
    assert report["feedback"]["left_out"] == {"for a state the cursor had not served": 3}
    report = json.loads(lineage(pool, str(second), "--json").stdout)
    assert [s["state_id"] for s in report["states"]] == drawn_second
    assert report["feedback"]["counted"] == 5


def test_rows_changed_or_gone_since_the_checkpoint_are_named(pool):
    folder, drawn = checkpoint(pool, "checkpoint-1", drawn=7, pulled=7)
    generate_run(
        pool.runs / "run000",
        SampleSpec(n_runs=1, n_checkpoints=2, n_cards=3, emb_dim=2, episodes_per_batch=1),
        9,
    )
    build_run(Settings(runs_dir=str(pool.runs), store_dir=str(pool.store)), "run000")
    report = json.loads(lineage(pool, str(folder), "--json").stdout)
    states = {s["state_id"]: s for s in report["states"]}
    assert set(states) == set(drawn)
    assert (states["run000_ckpt2"]["served_now"], states["run000_ckpt2"]["source"]) == (False, None)
    assert [sid for sid, s in states.items() if s["changed_since"]] == [
        "run000_ckpt0",
        "run000_ckpt1",
    ]
    text = lineage(pool, str(folder)).stdout
    assert "not served now" in text and "row changed since" in text


def test_a_missing_folder_is_refused_in_one_line(pool):
    refused(lineage(pool, str(pool.root / "nothing")), str(pool.root / "nothing"), "no such")


def test_a_folder_without_a_checkpoint_is_refused_in_one_line(pool):
    (pool.root / "empty").mkdir()
    refused(lineage(pool, str(pool.root / "empty")), "not a trainer checkpoint", CURSOR_FILE)


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_a_damaged_cursor_is_refused_in_one_line(pool, damage):
    folder, _ = checkpoint(pool, "checkpoint-2", drawn=2, pulled=2)
    path = folder / CURSOR_FILE
    if damage == "flipped":
        state = json.loads(path.read_text())
        state["drawn"] += 1
        path.write_text(json.dumps(state))
    else:
        path.write_bytes(path.read_bytes()[:40])
    line = refused(lineage(pool, str(folder)), str(path))
    assert ("damaged" if damage == "flipped" else "not a statepool cursor") in line


def test_a_pruned_pool_version_is_refused_naming_it_and_the_retention(pool):
    folder, _ = checkpoint(pool, "checkpoint-2", drawn=2, pulled=2)
    version = json.loads((folder / CURSOR_FILE).read_text())["version"]
    (versions_folder(pool.store) / f"{version}.parquet").unlink()
    refused(lineage(pool, str(folder)), version, "STATEPOOL_KEEP_VERSIONS")


def test_a_store_without_the_version_is_refused_naming_the_checkpoints_store(pool, tmp_path):
    folder, _ = checkpoint(pool, "checkpoint-2", drawn=2, pulled=2)
    other = tmp_path / "other_store"
    other.mkdir()
    refused(lineage(pool, str(folder), "--store", str(other)), str(other), str(pool.store))


def test_a_verl_data_file_that_cannot_be_read_is_refused_in_one_line(pool):
    folder = pool.root / "global_step_4"
    folder.mkdir()
    (folder / "data.pt").write_bytes(b"not a torch file")
    refused(lineage(pool, str(folder)), str(folder / "data.pt"))
