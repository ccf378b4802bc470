"""Each state's history in the feedback fold, against a direct computation on the same records."""

from __future__ import annotations

import itertools
import json
import random
import statistics

import msgspec
import pytest

from statepool_dagster.core.feedback.history import HISTORY_STEPS
from statepool_dagster.core.feedback.records import FeedbackRecord
from statepool_dagster.core.feedback.stats_store import (
    STATS_TABLE,
    load_fold,
    read_history,
    read_stats,
    update_stats,
)
from statepool_dagster.core.segments import SegmentWriter

T0 = 1_700_000_000.0
STATES = [f"run000_ckpt{k}" for k in range(4)]


def _records(seed: int, steps: int) -> list[FeedbackRecord]:
    """Per step, a group of 2-4 answers for a few states (one of them without reference ops)."""
    rng = random.Random(seed)
    out = []
    for step in range(steps):
        for sid in rng.sample(STATES, 2):
            for j in range(rng.randint(2, 4)):
                score = round(rng.random(), 3)
                out.append(
                    FeedbackRecord(
                        state_id=sid,
                        score=score,
                        group=f"{sid}/{step}",
                        time=T0 + 60 * step + j,
                        source="trl",
                        step=step,
                        ops_match=None if sid.endswith("3") else int(score > 0.5),
                    )
                )
    return out


def _write(folder, name: str, records: list[FeedbackRecord]) -> None:
    with SegmentWriter(folder, name) as writer:
        for r in records:
            writer.append(msgspec.json.encode(r))


def _rows(store) -> dict[tuple, dict]:
    table = read_history(store).to_pylist()
    return {(r["state_id"], r["step_first"]): r for r in table}


def test_the_history_per_state_and_step_is_the_direct_one_over_two_folds(tmp_path):
    records = _records(1, 30)
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    _write(feedback, "a", records[: len(records) // 2])
    update_stats(store, feedback)
    _write(feedback, "b", records[len(records) // 2 :])
    update_stats(store, feedback)
    rows = _rows(store)
    by_step: dict[tuple, list[FeedbackRecord]] = {}
    for r in records:
        by_step.setdefault((r.state_id, r.step), []).append(r)
    assert set(rows) == set(by_step)
    for key, rs in by_step.items():
        row, scores = rows[key], [r.score for r in rs]
        assert (row["step_last"], row["draws"], row["answers"]) == (key[1], 1, len(rs))
        assert row["score_mean"] == pytest.approx(statistics.mean(scores))
        assert row["score_var"] == pytest.approx(statistics.variance(scores))
        assert row["weight_std"] == pytest.approx(statistics.stdev(scores))
        matches = [r.ops_match for r in rs if r.ops_match is not None]
        if matches:
            rate = sum(matches) / len(matches)
            assert row["ops_match_rate"] == pytest.approx(rate)
            assert row["weight_pass_rate"] == pytest.approx(rate * (1 - rate))
        else:
            assert row["ops_match_rate"] is None and row["weight_pass_rate"] is None


def test_a_long_history_is_bounded_and_keeps_its_sums_and_its_recent_steps(tmp_path):
    steps = 1000
    rng = random.Random(2)
    records = [
        FeedbackRecord(
            state_id="s",
            score=rng.random(),
            group=f"g{step}/{j // 2}",
            time=T0 + step,
            source="trl",
            step=step,
        )
        for step in range(steps)
        for j in range(4)
    ]
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    _write(feedback, "w", records)
    update_stats(store, feedback)
    rows = sorted(read_history(store).to_pylist(), key=lambda r: r["step_first"])
    assert len(rows) <= HISTORY_STEPS
    # the buckets tile the steps, oldest coarsest, the newest one a step each
    assert rows[0]["step_first"] == 0 and rows[-1]["step_last"] == steps - 1
    assert all(a["step_last"] + 1 == b["step_first"] for a, b in itertools.pairwise(rows))
    assert all(r["step_first"] == r["step_last"] for r in rows[-HISTORY_STEPS // 4 :])
    assert sum(r["draws"] for r in rows) == 2 * steps
    assert sum(r["answers"] for r in rows) == 4 * steps
    scores = [r.score for r in records]
    total_mean = sum(r["score_mean"] * r["answers"] for r in rows) / (4 * steps)
    assert total_mean == pytest.approx(statistics.mean(scores))
    # a merged bucket's variance is that of all its steps' answers
    first = rows[0]
    mine = [r.score for r in records if first["step_first"] <= r.step <= first["step_last"]]
    assert first["score_var"] == pytest.approx(statistics.variance(mine))


def test_records_without_a_step_share_one_bucket_with_a_null_step(tmp_path):
    records = [
        FeedbackRecord(state_id="s", score=float(k), group=f"g{k}", time=T0 + k, source="verl")
        for k in range(3)
    ] + [FeedbackRecord(state_id="s", score=1.0, group="t", time=T0, source="trl", step=4)]
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    _write(feedback, "w", records)
    update_stats(store, feedback)
    rows = _rows(store)
    assert set(rows) == {("s", None), ("s", 4)}
    assert (rows["s", None]["draws"], rows["s", None]["answers"]) == (3, 3)
    assert rows["s", None]["score_var"] == pytest.approx(1.0)
    assert rows["s", 4]["score_var"] is None and rows["s", 4]["weight_std"] is None


def test_the_state_stats_table_is_the_same_with_the_history_kept(tmp_path):
    records = _records(3, 20)
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    _write(feedback, "w", records)
    update_stats(store, feedback, close_seconds=0, now=T0 + 10**6)
    stats = read_stats(store).to_pylist()
    by_state = {}
    for r in records:
        by_state.setdefault(r.state_id, []).append(r.score)
    for row in stats:
        assert row["answers"] == len(by_state[row["state_id"]])
        assert row["score_mean"] == pytest.approx(statistics.mean(by_state[row["state_id"]]))
    history = read_history(store).to_pylist()
    assert sum(r["answers"] for r in history) == sum(r["answers"] for r in stats)
    assert sum(r["draws"] for r in history) == sum(r["groups"] for r in stats)


def test_a_fold_saved_before_histories_were_kept_goes_on_with_the_new_records(tmp_path):
    records = _records(4, 10)
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    _write(feedback, "a", records[:10])
    update_stats(store, feedback)
    folder = store / "feedback_stats"
    generation = json.loads((folder / "fold.json").read_text())["generation"]
    (folder / f"history-{generation}.parquet").unlink()  # as a fold of an older release
    _write(feedback, "b", records[10:])
    update_stats(store, feedback)
    fold, _ = load_fold(store)
    assert sum(fold.history.table()["answers"].to_pylist()) == len(records) - 10
    assert (folder / STATS_TABLE).is_file()
    assert sum(r["answers"] for r in read_history(store).to_pylist()) == len(records) - 10
