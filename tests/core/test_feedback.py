"""Feedback: recording from the reward functions, imports, the state_stats asset, selection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.core.feedback.recorder import FEEDBACK_ENV, SEAL_ENV, flush_all
from statepool_dagster.core.feedback.records import decode
from statepool_dagster.core.feedback.select import Selection, SelectionOptions
from statepool_dagster.core.feedback.stats import STATS_SCHEMA
from statepool_dagster.core.feedback.stats_store import load_fold, read_stats
from statepool_dagster.core.segments import iter_segment_lines, list_segments
from statepool_dagster.core.segments.writer import SegmentWriter
from statepool_dagster.rewards import compute_score, trl_reward

from cli_helpers import cli_env
from process_helpers import BIN


def _segment_records(segment) -> list:
    return [decode(line) for _, line in iter_segment_lines(segment.path)]


def _records(folder: Path) -> list:
    return [r for segment in list_segments(folder) for r in _segment_records(segment)]


def test_compute_score_returns_the_state_id_and_records_when_a_folder_is_set(tmp_path, monkeypatch):
    extra = {"state_id": "run000_ckpt1"}
    monkeypatch.delenv(FEEDBACK_ENV, raising=False)
    off = compute_score("statepool/ovo", "[]", "[]", extra)
    assert off["state_id"] == "run000_ckpt1"
    monkeypatch.setenv(FEEDBACK_ENV, str(tmp_path / "fb"))
    result = compute_score("statepool/ovo", "[]", "[]", extra)
    compute_score("statepool/ovo", "nothing", "[]", extra)
    assert result == off
    flush_all()
    records = _records(tmp_path / "fb")
    assert [(r.state_id, r.score, r.ops_match, r.source) for r in records] == [
        ("run000_ckpt1", 1.0, 1, "verl"),
        ("run000_ckpt1", -1.0, 0, "verl"),
    ]
    assert records[0].group == records[1].group  # one window: one group


def test_trl_reward_records_the_step_and_a_group_per_prompt(tmp_path, monkeypatch):
    monkeypatch.setenv(FEEDBACK_ENV, str(tmp_path / "fb"))
    state_ids = ["a", "a", "b", "b"]
    scores = trl_reward(
        [None] * 4,
        ["[]", "x", "[]", "[]"],
        state_id=state_ids,
        ground_truth=["[]"] * 4,
        trainer_state=SimpleNamespace(global_step=7),
    )
    flush_all()
    records = _records(tmp_path / "fb")
    assert [r.score for r in records] == scores == [1.0, -1.0, 1.0, 1.0]
    assert {r.step for r in records} == {7}
    groups = [r.group for r in records]
    assert groups[0] == groups[1] != groups[2] == groups[3]


WRITER = textwrap.dedent(
    """
    import sys, time
    from statepool_dagster.rewards import compute_score
    name, count, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    for i in range(count):
        compute_score("s", "[]", "[]", {"state_id": f"{name}-{i}"})
        if pause:
            time.sleep(pause)
    print("done", flush=True)
    """
)


def test_concurrent_recorders_one_killed_lose_only_its_unsealed_tail(tmp_path):
    folder = tmp_path / "fb"
    env = {**os.environ, FEEDBACK_ENV: str(folder), SEAL_ENV: "0.3"}
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    steady = [
        subprocess.Popen([sys.executable, str(script), f"w{i}", "300", "0"], env=env)
        for i in range(2)
    ]
    killed = subprocess.Popen([sys.executable, str(script), "k", "100000", "0.002"], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the killed one to seal something
        if any(s.writer != "" and r.state_id.startswith("k-") for s in list_segments(folder)
               for r in _segment_records(s)):  # fmt: skip
            break
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert all(p.wait(timeout=120) == 0 for p in steady)
    ids = [r.state_id for r in _records(folder)]
    for w in ("w0", "w1"):
        assert sorted(i for i in ids if i.startswith(w + "-")) == sorted(
            f"{w}-{n}" for n in range(300)
        )
    seen = [int(i.split("-")[1]) for i in ids if i.startswith("k-")]
    assert seen and sorted(seen) == list(range(len(seen)))  # a prefix: only the tail is lost
    assert len(set(seen)) == len(seen)
    unsealed = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    assert unsealed  # the killed writer's open segment stays on disk, never listed


def _statepool(env, cwd, *args):
    return subprocess.run(
        [str(BIN / "statepool"), *args], env=env, cwd=cwd, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_feedback_command_imports_verl_dumps_and_names_bad_lines(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    good = {"input": "p", "output": "o", "gts": "[]", "score": 1.0, "state_id": "s1",
            "agreement": 1.0, "has_reference": 1.0}  # fmt: skip
    lines = [
        json.dumps({**good, "step": 2}),
        json.dumps({**good, "step": 2, "score": 0.5, "agreement": 0.5}),
        "{not json",
        json.dumps({**good, "state_id": None}),
        json.dumps([1, 2]),
    ]
    (dump / "2.jsonl").write_text("\n".join(lines) + "\n")
    (dump / "3.jsonl").write_text(json.dumps({**good, "step": 3}) + "\n")
    env = cli_env(SimpleNamespace(runs=tmp_path / "runs", store=tmp_path / "store"), tmp_path / "h")
    done = _statepool(env, tmp_path, "feedback", "--from-verl-dump", str(dump), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["records"] == 3
    assert [r.split(": ")[0] for r in report["rejects"]] == [
        f"{dump}/2.jsonl line 3",
        f"{dump}/2.jsonl line 4",
        f"{dump}/2.jsonl line 5",
    ]
    assert "2.jsonl line 3" in done.stderr
    records = _records(tmp_path / "store" / "feedback")
    assert sorted((r.step, r.score, r.ops_match) for r in records) == [
        (2, 0.5, 0),
        (2, 1.0, 1),
        (3, 1.0, 1),
    ]
    again = _statepool(env, tmp_path, "feedback", "--from-verl-dump", str(dump), "--json", "--fold")
    report = json.loads(again.stdout)
    assert report["records"] == 0  # the same files: nothing twice
    assert report["stats"] == {"states": 1, "new_segments": 2, "new_records": 3, "bad_lines": 0}
    stats = read_stats(tmp_path / "store").to_pylist()
    assert [(r["state_id"], r["groups"], r["answers"], r["last_step"]) for r in stats] == [
        ("s1", 2, 3, 3)
    ]
    assert stats[0]["ops_match_rate"] == pytest.approx(2 / 3)
    assert load_fold(tmp_path / "store")[1]["open_groups"] == 0  # a dump's groups are whole
    missing = _statepool(env, tmp_path, "feedback", "--from-scores", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_feedback_from_scores_reads_score_json_rows(tmp_path):
    scores = {
        "summary": {},
        "rows": [
            {"line": 1, "state_id": "a", "score": 1.0, "agreement": 1.0, "has_reference": 1.0},
            {"line": 2, "state_id": "a", "score": 0.0, "agreement": 0.0, "has_reference": 1.0},
            {"line": 3, "state_id": "b", "score": "bad"},
        ],
    }
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(scores))
    env = cli_env(SimpleNamespace(runs=tmp_path / "runs", store=tmp_path / "store"), tmp_path / "h")
    done = _statepool(env, tmp_path, "feedback", "--from-scores", str(path), "--to", "fb")
    assert done.returncode == 1 and "row 2 (completions line 3)" in done.stderr
    records = _records(tmp_path / "fb")
    assert [(r.state_id, r.ops_match) for r in records] == [("a", 1), ("a", 0)]
    assert records[0].group == records[1].group


def _stats_rows(**rows):
    base = {c: None for c in STATS_SCHEMA.names}
    table = [{**base, "state_id": sid, "last_stds": stds, "ops_match_rate": match,
              "score_mean": score} for sid, (stds, match, score) in rows.items()]  # fmt: skip
    import pyarrow as pa

    return pa.Table.from_pylist(table, schema=STATS_SCHEMA)


def test_selection_names_every_state_it_leaves_out():
    table = _stats_rows(
        flat=([0.3, 0.0, 0.0], 0.5, 0.2),
        teaching=([0.0, 0.0, 0.4], 0.5, 0.2),
        easy=([0.1], 0.95, 0.9),
        hard=([0.2], 0.0, -0.5),
        noref=([0.2], None, 0.9),
    )
    options = SelectionOptions(drop_zero_variance=2, difficulty_band=(0.1, 0.9), weight="pass-rate")
    selection = Selection.from_table(options, table)
    problems: list[str] = []
    rows = ["flat", "teaching", "easy", "hard", "noref", "unseen"]
    kept = dict(selection.apply(rows, lambda r: r, problems))
    assert kept == {"teaching": 0.25, "noref": 0.25, "unseen": 0.25}
    assert problems == [
        "state flat left out: its last 2 groups all had zero reward std (--drop-zero-variance 2)",
        "state easy left out: mean ops-match rate 0.950 outside --difficulty-band 0.1 0.9",
        "state hard left out: mean ops-match rate 0.000 outside --difficulty-band 0.1 0.9",
    ]
    by_score = Selection.from_table(
        SelectionOptions(difficulty_band=(0.0, 0.5), band_on="score", weight="std"), table
    )
    assert by_score.decide("noref").keep is False
    assert by_score.decide("teaching").weight == pytest.approx(0.4 / 3)
    assert Selection.from_table(SelectionOptions(), table).decide("flat").keep


def test_state_stats_asset_folds_new_segments_the_sensor_finds(tmp_path, instance, monkeypatch):
    from dagster import AssetKey, build_sensor_context

    from statepool_dagster.definitions import defs

    store, feedback = tmp_path / "store", tmp_path / "store" / "feedback"
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(store))
    monkeypatch.delenv(FEEDBACK_ENV, raising=False)
    sensor = defs().resolve_sensor_def("feedback_sensor")

    def tick():
        return sensor(
            build_sensor_context(instance=instance, definitions=defs(), resources=defs().resources)
        )

    assert tick().skip_reason is not None and not tick().run_requests
    rec = {"state_id": "s1", "score": 1.0, "group": "g1", "time": time.time(), "source": "trl",
           "ops_match": 1}  # fmt: skip
    with SegmentWriter(feedback, "w") as writer:
        writer.append(rec)
        writer.append({**rec, "score": 1.0})
        writer.append({**rec, "state_id": "s2", "group": "g2", "score": 0.0, "ops_match": 0})
        writer.append({**rec, "state_id": "s2", "group": "g2", "score": 1.0})
    request = tick().run_requests[0]
    assert request.run_key.startswith("state_stats:0:")
    job = defs().resolve_job_def("state_stats_job")
    assert job.execute_in_process(instance=instance).success
    event = instance.get_latest_materialization_event(AssetKey("state_stats"))
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert (meta["states"], meta["groups"], meta["answers"]) == (2, 2, 4)
    assert meta["zero_variance_share"] == 0.5
    assert "| s1 | 1 | 2 |" in meta["preview"]
    assert tick().skip_reason is not None


def test_selection_options_from_the_command_line_and_the_environment():
    import argparse

    from statepool_dagster.cli.selection_flags import add_selection_arguments

    parser = argparse.ArgumentParser()
    add_selection_arguments(parser)
    args = parser.parse_args(["--drop-zero-variance", "3", "--difficulty-band", "0.1", "0.9"])
    assert SelectionOptions.from_args(args) == SelectionOptions(3, (0.1, 0.9))
    # A flag not given keeps the environment's value; a flag given wins over it.
    from_env = SelectionOptions(2, (0.0, 0.5), band_on="score", weight="std")
    assert SelectionOptions.from_args(args, from_env) == SelectionOptions(
        3, (0.1, 0.9), band_on="score", weight="std"
    )
    env = {"STATEPOOL_SELECT_WEIGHT": "pass-rate", "STATEPOOL_SELECT_DIFFICULTY_BAND": "0,0.5"}
    assert SelectionOptions.from_env(env) == SelectionOptions(None, (0.0, 0.5), weight="pass-rate")
    assert not SelectionOptions.from_env({}).active
    with pytest.raises(ValueError, match="LO above HI"):
        SelectionOptions(difficulty_band=(0.9, 0.1))
