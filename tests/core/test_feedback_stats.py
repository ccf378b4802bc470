"""The feedback fold against a direct computation on the same records."""

from __future__ import annotations

import random
import statistics

import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.feedback.records import FeedbackRecord
from statepool_dagster.core.feedback.stats import LAST_STDS, Fold
from statepool_dagster.core.feedback.stats_store import load_fold, update_stats
from statepool_dagster.core.segments import SegmentWriter

T0 = 1_700_000_000.0


def _records(seed: int, n_groups: int) -> list[FeedbackRecord]:
    """Groups of 1-6 answers, a group's answers within 10 s, groups 50 s apart."""
    rng = random.Random(seed)
    states = [f"run{i:03d}_ckpt{k}" for i in range(3) for k in range(4)]
    out = []
    for g in range(n_groups):
        sid = rng.choice(states)
        size = rng.randint(1, 6)
        flat = rng.random() < 0.3  # every answer the same score: a zero-variance group
        base = rng.choice([0.0, 0.5, 1.0, -1.0])
        for j in range(size):
            score = base if flat else round(rng.random(), 3)
            match = None if sid.endswith("3") else int(score >= 0.99)
            out.append(
                FeedbackRecord(
                    state_id=sid,
                    score=score,
                    group=f"g{g}",
                    time=T0 + 50 * g + j,
                    source="trl",
                    step=g // 4,
                    ops_match=match,
                    parts={"agreement": score},
                )
            )
    return out


def _direct(records: list[FeedbackRecord]) -> dict[str, dict]:
    by_group: dict[str, list[FeedbackRecord]] = {}
    for r in records:
        by_group.setdefault(r.group, []).append(r)
    result: dict[str, dict] = {}
    for r in records:
        s = result.setdefault(r.state_id, {"scores": [], "matches": [], "steps": [], "g": []})
        s["scores"].append(r.score)
        s["steps"].append(r.step)
        if r.ops_match is not None:
            s["matches"].append(r.ops_match)
    for rs in sorted(by_group.values(), key=lambda rs: min(r.time for r in rs)):
        result[rs[0].state_id]["g"].append([r.score for r in rs])
    expected = {}
    for sid, s in result.items():
        spreads = [statistics.stdev(g) for g in s["g"] if len(g) > 1]
        expected[sid] = {
            "groups": len(s["g"]),
            "answers": len(s["scores"]),
            "score_mean": statistics.fmean(s["scores"]),
            "score_std": statistics.stdev(s["scores"]) if len(s["scores"]) > 1 else 0.0,
            "zero_variance_groups": sum(1 for x in spreads if x == 0),
            "zero_variance_share": sum(1 for x in spreads if x == 0) / len(spreads)
            if spreads
            else None,
            "last_stds": spreads[-LAST_STDS:],
            "last_step": max(s["steps"]),
            "ops_match_rate": statistics.fmean(s["matches"]) if s["matches"] else None,
        }
    return expected


def _close(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if a is None or b is None:
        return a is b
    return a == pytest.approx(b, abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fold_in_pieces_equals_a_direct_computation(tmp_path, seed):
    records = _records(seed, 120)
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    rng = random.Random(seed)
    cut = sorted(rng.sample(range(1, len(records)), 5))
    pieces = [records[a:b] for a, b in zip([0, *cut], [*cut, len(records)], strict=True)]
    for i, piece in enumerate(pieces):
        with SegmentWriter(feedback, f"w{i % 2}", max_records=37) as writer:
            for r in piece:
                writer.append(_as_dict(r))
        # groups closed 100 s after their last answer: the newest stay open between folds
        update_stats(store, feedback, close_seconds=100, now=piece[-1].time)
    report = update_stats(store, feedback, close_seconds=100, now=records[-1].time)
    assert report.new_segments == 0
    table = {row["state_id"]: row for row in report.table.to_pylist()}
    expected = _direct(records)
    assert set(table) == set(expected)
    for sid, want in expected.items():
        for key, value in want.items():
            assert _close(table[sid][key], value), (sid, key, table[sid][key], value)
    fold, manifest = load_fold(store)
    assert fold.records == len(records) and manifest["bad"] == 0


def _as_dict(r: FeedbackRecord) -> dict:
    return {f: getattr(r, f) for f in r.__struct_fields__}


def test_bad_lines_in_a_segment_are_counted_and_named(tmp_path):
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    good = _as_dict(_records(0, 1)[0])
    with SegmentWriter(feedback, "w") as writer:
        writer.append(good)
        writer.append(b"not json")
        writer.append({**good, "score": "high"})
        writer.append({**good, "ops_match": 3})
    report = update_stats(store, feedback)
    assert (report.new_records, report.bad) == (1, 3)
    _, manifest = load_fold(store)
    assert [e.split(": ")[0] for e in manifest["bad_examples"]] == [
        "w-000000.jsonl line 2",
        "w-000000.jsonl line 3",
        "w-000000.jsonl line 4",
    ]


def test_saved_tallies_read_back_equal_and_keep_their_columns(tmp_path):
    records = _records(3, 40)
    feedback, store = tmp_path / "feedback", tmp_path / "store"
    with SegmentWriter(feedback, "w") as writer:
        for r in records:
            writer.append(_as_dict(r))
    # half the groups stay open, so both kinds of tally are saved
    update_stats(store, feedback, close_seconds=0, now=records[len(records) // 2].time)
    fold, _ = load_fold(store)
    direct = Fold()
    direct.fold_segment(next(feedback.glob("w-*")), "w")
    direct.close_groups(records[len(records) // 2].time)
    assert fold.groups and fold.states == direct.states and fold.groups == direct.groups
    # the files an existing store holds: these columns, in this order
    folder = tmp_path / "store" / "feedback_stats"
    states = pq.read_schema(folder / f"states-{fold.generation}.parquet")
    groups = pq.read_schema(folder / f"groups-{fold.generation}.parquet")
    assert [(f.name, str(f.type)) for f in states] == [
        ("state_id", "string"),
        ("answers", "int64"),
        ("score_mean", "double"),
        ("score_m2", "double"),
        ("match_n", "int64"),
        ("match_known", "int64"),
        ("groups", "int64"),
        ("spread_groups", "int64"),
        ("zero_groups", "int64"),
        ("last_step", "int64"),
        ("last_time", "double"),
        ("last_stds", "list<element: double>"),
    ]
    assert [(f.name, str(f.type)) for f in groups] == [
        ("group", "string"),
        ("state_id", "string"),
        ("n", "int64"),
        ("mean", "double"),
        ("m2", "double"),
        ("first_time", "double"),
        ("last_time", "double"),
    ]
