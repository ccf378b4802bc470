"""``statepool score`` and ``statepool export --max-prompt-tokens``, run as commands on a store."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.export.collect import collect_export
from statepool_dagster.core.export.rows import ExportOptions
from statepool_dagster.core.prompts.spec import load_tool_specs
from statepool_dagster.core.rewards import Vocabulary, apply_ops
from statepool_dagster.demo.sample_runs import SampleSpec

from cli_helpers import STATEPOOL, assert_files_only, cli_env, local_sync

SPEC = SampleSpec(n_runs=2, n_checkpoints=4, n_cards=4, emb_dim=2, episodes_per_batch=2)


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("score")
    store = local_sync(root, SPEC)
    env = cli_env(SimpleNamespace(runs=root / "runs", store=store), root / "home")
    rows = collect_export(store, ExportOptions(val_fraction=0.0)).rows
    return SimpleNamespace(root=root, store=store, env=env, rows=rows)


def run(synced, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(STATEPOOL), *args],
        env=synced.env,
        cwd=synced.root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def test_reference_ops_applied_to_store_states_give_the_runs_next_snapshot(synced):
    vocabulary = Vocabulary.from_tool_specs(load_tool_specs(None))
    checked = 0
    for row in synced.rows:
        ops = json.loads(row.reference_ops)
        if ops["next_version"] is None:
            continue
        library = json.loads(row.state)["lib_snapshot"]
        snapshot = (
            synced.root / "runs" / row.run / "snapshots" / f"skills_v{ops['next_version']}.json"
        )
        expected = json.loads(snapshot.read_text(encoding="utf-8"))["cards"]
        applied = apply_ops(library, ops["ops"], vocabulary)["cards"]
        assert [(c["card_id"], c["trigger"], c["program"]) for c in applied] == [
            (c["card_id"], c["trigger"], c["program"]) for c in expected
        ]
        checked += 1
    assert checked >= SPEC.n_runs * (SPEC.n_checkpoints - 2)


def test_score_grades_groups_and_names_bad_lines(synced, tmp_path):
    changing = [r for r in synced.rows if json.loads(r.reference_ops)["ops"]]
    first, second = changing[0], changing[1]
    reference = json.loads(first.reference_ops)["ops"]
    path = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"state_id": first.state_id, "completion": json.dumps(reference)},
            {"state_id": first.state_id, "completion": "[]"},
            {"state_id": first.state_id, "completion": "I would not change anything."},
            {
                "state_id": second.state_id,
                "completion": [{"role": "assistant", "content": second.ground_truth()}],
            },
            "not json at all",
            {"state_id": "run999_v1", "completion": "[]"},
            {"completion": "[]"},
            "",
        ],
    )
    done = run(synced, "score", "--completions", str(path), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    scores = [row["score"] for row in report["rows"]]
    assert scores == [1.0, 0.0, -1.0, 1.0]
    group = report["groups"][first.state_id]
    assert group["n"] == 3 and group["mean"] == pytest.approx(0.0)
    assert group["std"] == pytest.approx(1.0)
    assert [round(r["advantage"], 3) for r in report["rows"]] == [1.0, 0.0, -1.0, 0.0]
    assert report["unknown_states"] == {"run999_v1": [6]}
    assert [b.split(": ", 1)[0] for b in report["bad_lines"]] == [
        f"{path} line 5",
        f"{path} line 7",
    ]
    assert f"statepool score: {path} line 6: unknown state id" in done.stderr
    assert f"statepool score: {path} line 5: not valid JSON" in done.stderr
    assert report["summary"]["lines_scored"] == 4 and report["summary"]["unparsed"] == 1


def test_score_exits_0_when_every_line_is_scored_and_prints_a_table(synced, tmp_path):
    row = synced.rows[0]
    path = write_jsonl(
        tmp_path / "ok.jsonl",
        [{"state_id": row.state_id, "completion": row.ground_truth()}] * 2,
    )
    done = run(synced, "score", "--completions", str(path))
    assert done.returncode == 0, done.stderr
    assert row.state_id in done.stdout
    assert "2 answers scored in 1 group, mean score 1.000" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--completions", "missing.jsonl"), "does not exist"),
        (("--completions", "x.jsonl", "--store", "no_store_here"), "--store: store no_store_here"),
    ],
)
def test_score_refuses_what_it_cannot_read_with_exit_2(synced, args, message):
    (synced.root / "x.jsonl").write_text("{}\n", encoding="utf-8")
    done = run(synced, "score", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_broken_outcome_hook_is_named_not_a_traceback(synced, tmp_path):
    (tmp_path / "bad_hook.py").write_text(
        "def outcome(next_library, state):\n    raise RuntimeError('judge offline')\n",
        encoding="utf-8",
    )
    row = synced.rows[0]
    path = write_jsonl(
        tmp_path / "a.jsonl", [{"state_id": row.state_id, "completion": row.ground_truth()}]
    )
    env = {
        **synced.env,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "STATEPOOL_OUTCOME_SCORER": "bad_hook:outcome",
    }
    done = subprocess.run(
        [str(STATEPOOL), "score", "--completions", str(path)],
        env=env,
        cwd=synced.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert f"outcome scorer bad_hook:outcome on state {row.state_id} failed" in done.stderr
    assert "RuntimeError: judge offline" in done.stderr and "Traceback" not in done.stderr


def test_export_leaves_out_overlong_prompts_by_an_estimate_and_says_so(synced, tmp_path):
    lengths = sorted(len(r.prompt) for r in synced.rows)
    limit = (lengths[len(lengths) // 2] + 3) // 4  # about half the prompts fit
    out = tmp_path / "trl"
    done = run(
        synced, "export", "--format", "trl", "--out", str(out),
        "--max-prompt-tokens", str(limit), "--val-fraction", "0", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    lengths_report = summary["prompt_lengths"]
    assert lengths_report["method"].startswith("estimate: characters / 4")
    over = {r.state_id for r in synced.rows if -(-len(r.prompt) // 4) > limit}
    assert over and set(lengths_report["left_out"]) == over
    assert all(any(sid in p for p in summary["problems"]) for sid in over)
    table = pq.read_table(out / "train.parquet")
    assert set(table.column("state_id").to_pylist()) == {r.state_id for r in synced.rows} - over
    assert table.column("prompt_tokens").null_count == table.num_rows  # an estimate is no count
    assert table.schema.field("prompt_tokens").type == pa.int64()


def test_export_refuses_a_missing_tokenizer_and_a_zero_limit(synced, tmp_path):
    done = run(
        synced, "export", "--format", "verl", "--out", str(tmp_path / "a"), "--tokenizer", "nowhere"
    )
    assert done.returncode == 2 and "nowhere: no such file or folder" in done.stderr
    done = run(
        synced,
        "export",
        "--format",
        "verl",
        "--out",
        str(tmp_path / "b"),
        "--max-prompt-tokens",
        "0",
    )
    assert done.returncode == 2 and "at least 1" in done.stderr


def test_score_reads_files_only_never_dagster(synced, tmp_path):
    row = synced.rows[0]
    path = write_jsonl(tmp_path / "a.jsonl", [{"state_id": row.state_id, "completion": "[]"}])
    assert_files_only(["score", "--completions", str(path), "--store", str(synced.store), "--json"])


def test_export_names_a_tokenizer_file_it_cannot_read(synced, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("not a tokenizer", encoding="utf-8")
    done = run(
        synced, "export", "--format", "trl", "--out", str(tmp_path / "t"), "--tokenizer", str(bad)
    )
    assert done.returncode == 2, done.stderr
    assert f"tokenizer {bad}" in done.stderr and "Traceback" not in done.stderr
