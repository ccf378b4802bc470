"""CheckpointState's JSON text is the original dataclass's, and seed files read back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from statepool_dagster.core.states.models import CheckpointState

CASES = {
    "minimal": dict(
        state_id="r_ckpt0",
        dataset="ovo",
        lib_snapshot={},
        episodes=[],
        analysis=None,
        last_receipt="(collected offline)",
    ),
    "rich": dict(
        state_id="run000_ckpt10",
        dataset="ovo",
        lib_snapshot={
            "version": 10,
            "cards": [
                {
                    "card_id": "c0001",
                    "trigger": "When {x} — 日本語の字幕",
                    "program": "1. “quote” 2. tab\there\nnewline \\ backslash",
                    "meta_info": {"injected": 3, "fired": 2, "helped": 1, "harmful": 0},
                    "extra": [None, True, False, 1.5, -0.0, 1e-07, 12345678901234567890],
                }
            ],
            "unknown_top": {"nested": {"deep": []}},
        },
        episodes=[
            {"id": "e1", "realtime": 12.3, "correct": True, "skill_lib_version": 9, "q": "é🍮"},
            {"id": "e2", "options": ["A. x", "B. y"], "gt": "B", "response": None},
        ],
        analysis={"summary": "ok", "failure_patterns": ["a"], "zz": {"k": 1}},
        last_receipt="receipt with ünïcode\u2028and a line separator",
        followup_qids=["q1", "q2"],
        gt_map={"q1": "A", "q2": ["B", "C"]},
    ),
}


def seed_state(seed_module, fields: dict):
    return seed_module.CheckpointState(**json.loads(json.dumps(fields)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_to_json_equals_the_seed_dataclass_text_exactly(seed_module, case):
    fields = CASES[case]
    ours = CheckpointState(**json.loads(json.dumps(fields))).to_json()
    theirs = seed_state(seed_module, fields).to_json()
    assert ours == theirs
    assert ours == json.dumps(
        dataclasses.asdict(seed_state(seed_module, fields)), ensure_ascii=False
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_json_reads_a_file_the_seed_wrote(seed_module, tmp_path: Path, case):
    written = seed_state(seed_module, CASES[case])
    path = tmp_path / f"{written.state_id}.json"
    with open(path, "w", encoding="utf-8") as f:  # as the seed's collect_from_run writes
        f.write(written.to_json())
    from_bytes = CheckpointState.from_json(path.read_bytes())
    from_text = CheckpointState.from_json(path.read_text(encoding="utf-8"))
    assert from_bytes == from_text
    assert from_bytes.to_dict() == dataclasses.asdict(written)
    assert from_bytes.to_json() == path.read_text(encoding="utf-8")


def test_seed_from_json_reads_what_to_json_writes(seed_module):
    ours = CheckpointState(**CASES["rich"])
    assert dataclasses.asdict(seed_module.CheckpointState.from_json(ours.to_json())) == (
        ours.to_dict()
    )


def test_to_json_keeps_the_seed_field_order():
    keys = list(json.loads(CheckpointState(**CASES["minimal"]).to_json()))
    assert keys == [
        "state_id",
        "dataset",
        "lib_snapshot",
        "episodes",
        "analysis",
        "last_receipt",
        "followup_qids",
        "gt_map",
    ]


def test_to_json_leaves_non_ascii_unescaped():
    text = CheckpointState(**CASES["rich"]).to_json()
    assert "日本語の字幕" in text and "é🍮" in text
    assert "\\u65e5" not in text
