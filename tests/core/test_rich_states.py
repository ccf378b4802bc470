"""Opt-in richer states on a small hand-checked run: pairing, sidecars, follow-up questions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from statepool_dagster import load_state_pool
from statepool_dagster.core.config import Settings
from statepool_dagster.core.runs.files import fingerprint_run
from statepool_dagster.core.states.join import OFFLINE_RECEIPT

from instance_helpers import latest_metadata, materialize_run

DEFAULTS = (
    Path(__file__).resolve().parents[2] / "statepool_dagster" / "core" / "prompts" / "defaults"
)

LIBRARIES = {
    0: [("c1", "when one", "1. do one")],
    1: [("c1", "when one", "1. do one better"), ("c2", "when two", "1. do two")],
    2: [("c2", "when two", "1. do two"), ("c3", "when three", "1. do three")],
}
BATCHES = {0: [("q0a", "A"), ("q0b", "B")], 1: [("q1a", "C")], 2: [("q2a", "D"), ("q2b", "A")]}
ANALYSIS = {
    "failure_patterns": ["answers before the clue appears"],
    "observations": "c1 fired on every OCR question — and hurt",
    "summary": "wait for evidence",
    "raw_notes": "not shown in the prompt",
}


def write_run(runs: Path, name: str = "hand") -> Path:
    """Three checkpoints; library k served batch k, the curator then wrote k+1."""
    run = runs / name
    (run / "snapshots").mkdir(parents=True)
    for k, cards in LIBRARIES.items():
        library = {
            "version": k,
            "cards": [
                {
                    "card_id": cid,
                    "trigger": trigger,
                    "program": program,
                    "meta_info": {"injected": k, "fired": 0, "helped": 0, "harmful": 0},
                    "_trigger_emb": [0.5, -0.5],
                }
                for cid, trigger, program in cards
            ],
        }
        (run / "snapshots" / f"skills_v{k}.json").write_text(json.dumps(library), "utf-8")
    lines = [
        json.dumps({"id": qid, "gt": gt, "response": gt, "correct": True, "skill_lib_version": k})
        for k, batch in BATCHES.items()
        for qid, gt in batch
    ]
    (run / "episodes.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    return run


def ids(batch_version: int) -> list[str]:
    return [qid for qid, _ in BATCHES[batch_version]]


def states_by_checkpoint() -> dict[int, dict]:
    return {int(s.state_id.rsplit("ckpt", 1)[1]): s.to_dict() for s in load_state_pool()}


def cards_of(state: dict) -> list[str]:
    return [c["card_id"] for c in state["lib_snapshot"]["cards"]]


def test_defaults_are_the_seeds_pairing_and_no_followup():
    settings = Settings()
    assert (settings.pairing, settings.followup) == ("seed", "none")
    env = {"STATEPOOL_PAIRING": "pre_curation", "STATEPOOL_FOLLOWUP": "next_batch"}
    assert Settings.from_env(env).pairing == "pre_curation"
    assert Settings.from_env(env).followup == "next_batch"
    with pytest.raises(ValidationError):
        Settings.from_env({"STATEPOOL_PAIRING": "latest"})


def test_seed_pairing_gives_library_k_with_batch_k_minus_1(workspace, instance):
    write_run(workspace.runs)
    assert materialize_run(instance, "hand").success
    states = states_by_checkpoint()
    assert [cards_of(states[k]) for k in (0, 1, 2)] == [["c1"], ["c1", "c2"], ["c2", "c3"]]
    assert [[e["id"] for e in states[k]["episodes"]] for k in (0, 1, 2)] == [
        ids(0),
        ids(0),
        ids(1),
    ]
    assert all(s["followup_qids"] == [] and s["gt_map"] == {} for s in states.values())


def test_pre_curation_pairs_checkpoint_k_with_library_and_batch_k_minus_1(
    workspace, instance, monkeypatch
):
    monkeypatch.setenv("STATEPOOL_PAIRING", "pre_curation")
    write_run(workspace.runs)
    assert materialize_run(instance, "hand").success
    states = states_by_checkpoint()
    assert sorted(states) == [1, 2]
    assert states[1]["state_id"] == "hand_ckpt1"
    assert (cards_of(states[1]), states[1]["lib_snapshot"]["version"]) == (["c1"], 0)
    assert (cards_of(states[2]), states[2]["lib_snapshot"]["version"]) == (["c1", "c2"], 1)
    assert [e["id"] for e in states[1]["episodes"]] == ids(0)
    assert [e["id"] for e in states[2]["episodes"]] == ids(1)
    metadata = latest_metadata(instance, "checkpoint_states", "hand")
    assert metadata["skipped"] == {"0": "pre_curation: checkpoint 0 has no earlier library"}
    table = pd.read_parquet(workspace.store / "checkpoint_states" / "hand")
    assert table["library_version"].tolist() == [0, 1]
    assert table["batch_version"].tolist() == [0, 1]
    # The ops are what the curator wrote after seeing that library and batch.
    assert [json.loads(t) for t in table["reference_ops"]] == [
        {
            "next_version": 1,
            "ops": [
                {"op": "update_card", "card_id": "c1", "program": "1. do one better"},
                {"op": "add_card", "card_id": "c2", "trigger": "when two", "program": "1. do two"},
            ],
        },
        {
            "next_version": 2,
            "ops": [
                {"op": "delete_card", "card_id": "c1"},
                {
                    "op": "add_card",
                    "card_id": "c3",
                    "trigger": "when three",
                    "program": "1. do three",
                },
            ],
        },
    ]


def test_pre_curation_skips_a_checkpoint_whose_earlier_library_is_missing(
    workspace, instance, monkeypatch
):
    monkeypatch.setenv("STATEPOOL_PAIRING", "pre_curation")
    run = write_run(workspace.runs)
    (run / "snapshots" / "skills_v1.json").unlink()
    assert materialize_run(instance, "hand").success
    assert sorted(states_by_checkpoint()) == []
    assert latest_metadata(instance, "checkpoint_states", "hand")["skipped"] == {
        "0": "pre_curation: checkpoint 0 has no earlier library",
        "2": "pre_curation: no library version 1 (skills_v1.json)",
    }


@pytest.mark.parametrize(
    ("pairing", "followup", "expected"),
    [
        ("seed", "batch", {0: ids(0), 1: ids(0), 2: ids(1)}),
        ("seed", "next_batch", {0: ids(0), 1: ids(1), 2: ids(2)}),
        ("pre_curation", "batch", {1: ids(0), 2: ids(1)}),
        ("pre_curation", "next_batch", {1: ids(1), 2: ids(2)}),
    ],
)
def test_followup_fills_the_questions_to_replay_and_their_answers(
    workspace, instance, monkeypatch, pairing, followup, expected
):
    monkeypatch.setenv("STATEPOOL_PAIRING", pairing)
    monkeypatch.setenv("STATEPOOL_FOLLOWUP", followup)
    write_run(workspace.runs)
    assert materialize_run(instance, "hand").success
    states = states_by_checkpoint()
    assert {k: s["followup_qids"] for k, s in states.items()} == expected
    answers = {qid: gt for batch in BATCHES.values() for qid, gt in batch}
    for state in states.values():
        assert state["gt_map"] == {qid: answers[qid] for qid in state["followup_qids"]}


def write_sidecars(run: Path) -> None:
    (run / "analyses").mkdir()
    (run / "analyses" / "analysis_v1.json").write_text(json.dumps(ANALYSIS), "utf-8")
    (run / "receipts").mkdir()
    (run / "receipts" / "receipt_v1.txt").write_text("applied: update_card c1 (ok)\n", "utf-8")


def test_sidecars_fill_analysis_and_last_receipt_of_their_checkpoint(workspace, instance):
    write_sidecars(write_run(workspace.runs))
    assert materialize_run(instance, "hand").success
    states = states_by_checkpoint()
    assert states[1]["analysis"] == ANALYSIS
    assert states[1]["last_receipt"] == "applied: update_card c1 (ok)"
    assert (states[0]["analysis"], states[0]["last_receipt"]) == (None, OFFLINE_RECEIPT)
    metadata = latest_metadata(instance, "checkpoint_states", "hand")
    assert (metadata["analyses"], metadata["receipts"], metadata["sidecar_rejects"]) == (1, 1, 0)


@pytest.fixture
def fake_infer(tmp_path, monkeypatch):
    """The inference-side modules the original script imports, holding the bundled defaults."""
    root = tmp_path / "infer_side"
    (root / "infer" / "curator").mkdir(parents=True)
    (root / "infer" / "__init__.py").write_text("", "utf-8")
    (root / "infer" / "curator" / "__init__.py").write_text("", "utf-8")
    template = (DEFAULTS / "curator_prompt.txt").read_text("utf-8")
    rule = (DEFAULTS / "param_rule.txt").read_text("utf-8")
    specs = json.loads((DEFAULTS / "tool_specs.json").read_text("utf-8"))
    (root / "infer" / "curator" / "curator.py").write_text(
        f"CURATOR_PROMPT = {template!r}\nPARAM_RULE_ON = {rule!r}\n", "utf-8"
    )
    (root / "infer" / "curator" / "reflector.py").write_text(
        "from statepool_dagster.core.prompts.template import format_episodes\n", "utf-8"
    )
    (root / "infer" / "tools.py").write_text(f"TOOL_SPECS = {specs!r}\n", "utf-8")
    monkeypatch.syspath_prepend(str(root))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "infer"]:
        del sys.modules[name]


def test_prompt_shows_the_analysis_block_exactly_as_the_seed_renders_it(
    workspace, instance, seed, fake_infer
):
    write_sidecars(write_run(workspace.runs))
    assert materialize_run(instance, "hand").success
    prompts = pd.read_parquet(workspace.store / "curator_prompts" / "hand")
    for state, prompt in zip(load_state_pool(), prompts["prompt"], strict=True):
        original = seed.CheckpointState.from_json(state.to_json())
        assert prompt == seed.build_curator_prompt(original, cfg=None)
    with_analysis = prompts["prompt"].iloc[1]
    shown = {k: v for k, v in ANALYSIS.items() if k != "raw_notes"}
    assert json.dumps(shown, ensure_ascii=False, indent=1) in with_analysis
    assert "## Raw episodes" not in with_analysis
    assert "## Raw episodes" in prompts["prompt"].iloc[0]


def test_bad_sidecars_are_set_aside_with_a_reason_and_the_run_goes_on(workspace, instance):
    run = write_run(workspace.runs)
    (run / "analyses").mkdir()
    (run / "analyses" / "analysis_v0.json").write_text("{not json", "utf-8")
    (run / "analyses" / "analysis_v2.json").write_text("[1, 2]", "utf-8")
    (run / "analyses" / "analysis_v01.json").write_text("{}", "utf-8")
    (run / "analyses" / "notes.md").write_text("scratch", "utf-8")
    (run / "receipts").mkdir()
    (run / "receipts" / "receipt_v1.txt").write_bytes(b"\xff\xfe broken")
    assert materialize_run(instance, "hand").success
    states = states_by_checkpoint()
    assert all(s["analysis"] is None for s in states.values())
    assert states[1]["last_receipt"] == OFFLINE_RECEIPT
    metadata = latest_metadata(instance, "checkpoint_states", "hand")
    assert metadata["sidecar_rejects"] == 3
    assert metadata["ignored_sidecars"] == {
        "analyses/analysis_v01.json": "name is not analysis_v<int>.json",
        "analyses/notes.md": "name is not analysis_v<int>.json",
    }
    lines = (workspace.store / "rejects" / "hand.jsonl").read_text("utf-8").splitlines()
    rejects = {r["file"]: r["error"] for r in map(json.loads, lines) if r["source"] == "sidecars"}
    assert rejects["hand/analyses/analysis_v0.json"].startswith("not valid JSON")
    assert rejects["hand/analyses/analysis_v2.json"] == "analysis must be a JSON object (got list)"
    assert rejects["hand/receipts/receipt_v1.txt"].startswith("not valid UTF-8")


def test_a_bad_sidecar_fails_the_partition_in_strict_mode(workspace, instance, monkeypatch):
    monkeypatch.setenv("STATEPOOL_ON_BAD_RECORD", "fail")
    run = write_run(workspace.runs)
    (run / "analyses").mkdir()
    (run / "analyses" / "analysis_v1.json").write_text("{not json", "utf-8")
    assert not materialize_run(instance, "hand", raise_on_error=False).success


def test_a_new_sidecar_changes_the_runs_fingerprint(workspace):
    run = write_run(workspace.runs)
    before = fingerprint_run(run).digest
    write_sidecars(run)
    assert fingerprint_run(run).digest != before
