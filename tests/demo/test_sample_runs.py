"""Tests for the deterministic sample-run generator."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from statepool_dagster.demo.pools import TASKS
from statepool_dagster.demo.sample_runs import (
    SampleSpec,
    append_checkpoint,
    generate_run,
    generate_runs,
)

CARD_KEYS = ["card_id", "trigger", "program", "meta_info", "_trigger_emb"]
META_KEYS = ["injected", "fired", "helped", "harmful"]
EPISODE_KEYS = [
    "id",
    "task",
    "video",
    "realtime",
    "question",
    "options",
    "gt",
    "response",
    "correct",
    "fired_cards",
    "skill_lib_version",
]


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root, keyed by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _episodes(run: Path) -> list[dict]:
    text = (run / "episodes.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _snapshots(run: Path) -> list[dict]:
    files = sorted(
        (run / "snapshots").iterdir(),
        key=lambda p: int(re.fullmatch(r"skills_v(\d+)\.json", p.name)[1]),
    )
    return [json.loads(p.read_text(encoding="utf-8")) for p in files]


def test_layout_and_counts(tmp_path: Path) -> None:
    spec = SampleSpec(n_runs=2, n_checkpoints=4, episodes_per_batch=5)
    runs = generate_runs(tmp_path, spec)
    assert runs == [tmp_path / "run000", tmp_path / "run001"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run000", "run001"]
    for run in runs:
        assert sorted(p.name for p in run.iterdir()) == ["episodes.jsonl", "snapshots"]
        names = sorted(p.name for p in (run / "snapshots").iterdir())
        assert names == [f"skills_v{k}.json" for k in range(4)]
        eps = _episodes(run)
        assert len(eps) == 4 * 5
        for k in range(4):
            assert sum(e["skill_lib_version"] == k for e in eps) == 5
        assert len({e["id"] for e in eps}) == len(eps)


def test_run_prefix(tmp_path: Path) -> None:
    runs = generate_runs(tmp_path, SampleSpec(n_runs=2, n_checkpoints=1, run_prefix="exp_"))
    assert [r.name for r in runs] == ["exp_000", "exp_001"]


def test_deterministic(tmp_path: Path) -> None:
    spec = SampleSpec(n_runs=2, n_checkpoints=5, n_cards=10, emb_dim=24, seed=7)
    generate_runs(tmp_path / "a", spec)
    generate_runs(tmp_path / "b", spec)
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a and a == b
    generate_runs(tmp_path / "c", dataclasses.replace(spec, seed=8))
    assert _tree(tmp_path / "c") != a


def test_runs_differ(tmp_path: Path) -> None:
    r0, r1 = generate_runs(tmp_path, SampleSpec(n_runs=2, n_checkpoints=2))
    assert (r0 / "snapshots" / "skills_v0.json").read_bytes() != (
        r1 / "snapshots" / "skills_v0.json"
    ).read_bytes()


@pytest.mark.parametrize("n", [0, 1, 5, 12])
def test_append_checkpoint_matches_generate(tmp_path: Path, n: int) -> None:
    spec = SampleSpec(n_checkpoints=n, n_cards=9, emb_dim=12, episodes_per_batch=6, seed=3)
    grown = tmp_path / "grown" / "run002"
    generate_run(grown, spec, run_index=2)
    assert append_checkpoint(grown, spec, run_index=2) == n
    full = tmp_path / "full" / "run002"
    generate_run(full, dataclasses.replace(spec, n_checkpoints=n + 1), run_index=2)
    assert _tree(grown) == _tree(full)


def test_append_checkpoint_repeatedly(tmp_path: Path) -> None:
    spec = SampleSpec(n_checkpoints=2, n_cards=6, emb_dim=8, episodes_per_batch=3)
    run = generate_run(tmp_path / "g" / "run000", spec)
    for expected in range(2, 9):
        assert append_checkpoint(run, spec) == expected
    full = generate_run(tmp_path / "f" / "run000", dataclasses.replace(spec, n_checkpoints=9))
    assert _tree(run) == _tree(full)


def test_append_ignores_non_snapshot_files(tmp_path: Path) -> None:
    spec = SampleSpec(n_checkpoints=2)
    run = generate_run(tmp_path / "run000", spec)
    (run / "snapshots" / "skills_v9.json.bak").write_text("x")
    (run / "snapshots" / "notes_v3.json").write_text("x")
    assert append_checkpoint(run, spec) == 2


def test_regenerate_removes_stale_snapshots(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "run000", SampleSpec(n_checkpoints=5))
    generate_run(run, SampleSpec(n_checkpoints=2))
    assert sorted(p.name for p in (run / "snapshots").iterdir()) == [
        "skills_v0.json",
        "skills_v1.json",
    ]


def test_schema(tmp_path: Path) -> None:
    spec = SampleSpec(n_runs=2, n_checkpoints=10, n_cards=14, emb_dim=20, episodes_per_batch=12)
    for run in generate_runs(tmp_path, spec):
        libs = _snapshots(run)
        assert [lib["version"] for lib in libs] == list(range(10))
        seen: dict[str, tuple] = {}
        max_id = -1
        for lib in libs:
            assert list(lib) == ["version", "cards"]
            ids = [c["card_id"] for c in lib["cards"]]
            assert len(ids) == len(set(ids))
            assert 1 <= len(ids) <= spec.n_cards + 3
            for card in lib["cards"]:
                assert list(card) == CARD_KEYS
                assert re.fullmatch(r"c\d{4}", card["card_id"])
                assert isinstance(card["trigger"], str)
                assert card["trigger"].startswith("When the question asks ")
                assert isinstance(card["program"], str) and card["program"].startswith("1. ")
                meta = card["meta_info"]
                assert list(meta) == META_KEYS
                assert all(type(meta[k]) is int and meta[k] >= 0 for k in META_KEYS)
                assert meta["helped"] + meta["harmful"] <= meta["fired"] <= meta["injected"]
                emb = card["_trigger_emb"]
                assert len(emb) == spec.emb_dim
                assert all(type(x) is float and -1.0 <= x <= 1.0 for x in emb)
                assert all(round(x, 8) == x for x in emb)
                cid, num = card["card_id"], int(card["card_id"][1:])
                if cid in seen:
                    prev_meta, prev_text, prev_emb = seen[cid]
                    assert all(meta[k] >= prev_meta[k] for k in META_KEYS)
                    # embedding changes exactly when the text is rewritten
                    same_text = (card["trigger"], card["program"]) == prev_text
                    assert (emb == prev_emb) == same_text
                else:
                    assert num > max_id, "card ids must never be reused"
                    max_id = num
                seen[cid] = (meta, (card["trigger"], card["program"]), emb)
        # file text is exactly json.dumps of the parsed structure
        for p in (run / "snapshots").iterdir():
            text = p.read_text(encoding="utf-8")
            assert json.dumps(json.loads(text), ensure_ascii=False) == text

        lib_ids = {lib["version"]: {c["card_id"] for c in lib["cards"]} for lib in libs}
        raw = (run / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
        for line, ep in zip(raw, _episodes(run), strict=True):
            assert json.dumps(ep, ensure_ascii=False) == line
            assert list(ep) == EPISODE_KEYS
            assert ep["id"].startswith(f"{run.name}-v{ep['skill_lib_version']}-")
            assert ep["task"] in TASKS
            assert ep["video"].startswith("ovo/videos/") and ep["video"].endswith(".mp4")
            assert isinstance(ep["realtime"], float) and round(ep["realtime"], 1) == ep["realtime"]
            assert isinstance(ep["question"], str) and ep["question"]
            assert [o[:3] for o in ep["options"]] == ["A. ", "B. ", "C. ", "D. "]
            assert ep["gt"] in "ABCD" and ep["response"] in "ABCD"
            assert len(ep["gt"]) == len(ep["response"]) == 1
            assert ep["correct"] is (ep["gt"] == ep["response"])
            assert 0 <= len(ep["fired_cards"]) <= 3
            assert len(set(ep["fired_cards"])) == len(ep["fired_cards"])
            assert set(ep["fired_cards"]) <= lib_ids[ep["skill_lib_version"]]


def test_library_grows_then_stays_near_target(tmp_path: Path) -> None:
    spec = SampleSpec(n_checkpoints=30, n_cards=40, emb_dim=4, episodes_per_batch=4)
    sizes = [len(lib["cards"]) for lib in _snapshots(generate_run(tmp_path / "run000", spec))]
    assert sizes[0] == 20
    assert all(abs(s - 40) <= 3 for s in sizes[10:])


def test_lengths_non_ascii_and_braces(tmp_path: Path) -> None:
    runs = generate_runs(tmp_path, SampleSpec())
    questions, options, triggers, programs = [], [], [], []
    for run in runs:
        for ep in _episodes(run):
            questions.append(ep["question"])
            options.extend(ep["options"])
        for lib in _snapshots(run):
            triggers += [c["trigger"] for c in lib["cards"]]
            programs += [c["program"] for c in lib["cards"]]

    def non_ascii(s: str) -> bool:
        return not s.isascii()

    def braces(s: str) -> bool:
        return "{" in s and "}" in s

    assert any(non_ascii(q) for q in questions)
    assert sum(map(non_ascii, questions)) < len(questions) / 5
    assert any(braces(s) for s in questions + options)
    assert any(non_ascii(t) for t in triggers)
    assert any(braces(t) for t in triggers)
    assert any(len(t) > 150 for t in triggers)
    assert any(len(p) > 200 for p in programs)
    # non-ASCII survives on disk unescaped
    files = [p for run in runs for p in run.rglob("*.json*")]
    assert any(not p.read_text(encoding="utf-8").isascii() for p in files)


def test_accuracy_rises(tmp_path: Path) -> None:
    spec = SampleSpec(n_runs=2, n_checkpoints=24, n_cards=12, emb_dim=4, episodes_per_batch=30)
    eps = [e for run in generate_runs(tmp_path, spec) for e in _episodes(run)]
    third = spec.n_checkpoints // 3

    def acc(lo: int, hi: int) -> float:
        sel = [e["correct"] for e in eps if lo <= e["skill_lib_version"] < hi]
        return sum(sel) / len(sel)

    first, last = acc(0, third), acc(2 * third, spec.n_checkpoints)
    assert last > first
    assert 0.35 < first < 0.6
    assert 0.6 < last < 0.8
