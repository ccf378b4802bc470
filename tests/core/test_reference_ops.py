"""Reference ops: what the run's curator did between a state's library and the next one."""

from __future__ import annotations

import json

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, SNAPSHOTS, STATES
from statepool_dagster.core.prompts.spec import load_tool_specs
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.states.reference_ops import (
    LAST_SNAPSHOT_NOTE,
    card_ops,
    reference_ops,
)
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from instance_helpers import materialize_run


def card(card_id: str, trigger: str = "t", program: str = "p", **meta) -> dict:
    return {"card_id": card_id, "trigger": trigger, "program": program, "meta_info": meta}


def lib(version: int, *cards: dict) -> dict:
    return {"version": version, "cards": list(cards)}


def test_added_card_becomes_add_card_with_the_id_the_next_library_used():
    ops = card_ops(lib(0, card("c1")), lib(1, card("c1"), card("c2", "when X", "1. do Y")))
    assert ops == [{"op": "add_card", "card_id": "c2", "trigger": "when X", "program": "1. do Y"}]


def test_removed_card_becomes_delete_card():
    assert card_ops(lib(0, card("c1"), card("c2")), lib(1, card("c2"))) == [
        {"op": "delete_card", "card_id": "c1"}
    ]


def test_rewrite_becomes_update_card_with_only_the_new_text():
    before = lib(0, card("c1", "old when", "old do"), card("c2", "when", "old do"))
    after = lib(1, card("c1", "new when", "new do"), card("c2", "when", "new do"))
    assert card_ops(before, after) == [
        {"op": "update_card", "card_id": "c1", "trigger": "new when", "program": "new do"},
        {"op": "update_card", "card_id": "c2", "program": "new do"},
    ]


def test_unchanged_library_gives_no_ops():
    library = lib(0, card("c1"), card("c2"))
    assert card_ops(library, json.loads(json.dumps(library))) == []


def test_meta_only_changes_give_no_op():
    before = lib(0, card("c1", injected=1, fired=0, helped=0, harmful=0))
    after = lib(1, {**card("c1", injected=9, fired=4, helped=3, harmful=1), "note": "reviewed"})
    assert card_ops(before, after) == []


def test_ops_are_rewrites_then_deletions_then_additions():
    before = lib(0, card("c1"), card("c2"), card("c3"))
    after = lib(1, card("c9"), card("c3", program="new"), card("c8"), card("c1"))
    assert [(o["op"], o["card_id"]) for o in card_ops(before, after)] == [
        ("update_card", "c3"),
        ("delete_card", "c2"),
        ("add_card", "c9"),
        ("add_card", "c8"),
    ]


def test_ops_name_the_bundled_tools_and_only_their_parameters():
    specs = load_tool_specs(None)
    before = lib(0, card("c1"), card("c2"))
    after = lib(1, card("c1", "changed"), card("c3"))
    for op in card_ops(before, after):
        assert op["op"] in specs
        # add_card also carries the id the next library gave the card
        assert set(op) - {"op", "card_id"} <= set(specs[op["op"]]["params"])


_text = st.sampled_from(["a", "b", "c"])
_library = st.dictionaries(
    st.sampled_from([f"c{i}" for i in range(6)]), st.tuples(_text, _text), max_size=6
)


def _apply(cards: dict[str, tuple[str, str]], ops: list[dict]) -> dict[str, tuple[str, str]]:
    cards = dict(cards)
    for op in ops:
        if op["op"] == "delete_card":
            del cards[op["card_id"]]
        else:
            trigger, program = cards.get(op["card_id"], (None, None))
            cards[op["card_id"]] = (op.get("trigger", trigger), op.get("program", program))
    return cards


@given(_library, _library)
def test_replaying_the_ops_rebuilds_the_next_librarys_cards(before, after):
    def as_lib(cards):
        return lib(0, *(card(cid, t, p) for cid, (t, p) in cards.items()))

    assert _apply(before, card_ops(as_lib(before), as_lib(after))) == after


def test_last_snapshot_has_no_ops_and_says_so():
    assert reference_ops(lib(3, card("c1")), None, None) == {
        "next_version": None,
        "ops": [],
        "note": LAST_SNAPSHOT_NOTE,
    }


def test_each_state_carries_the_diff_to_the_next_library_present(tmp_path):
    """Snapshots 0, 1 and 3: the state of 1 is diffed against 3, the one after it on disk."""
    run = tmp_path / "runs" / "r"
    (run / "snapshots").mkdir(parents=True)
    libraries = {0: lib(0, card("c1")), 1: lib(1, card("c1"), card("c2")), 3: lib(3, card("c2"))}
    for version, library in libraries.items():
        (run / "snapshots" / f"skills_v{version}.json").write_text(json.dumps(library))
    episodes = [{"id": f"q{k}", "skill_lib_version": k} for k in libraries]
    (run / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    settings = Settings(runs_dir=str(run.parent), store_dir=str(tmp_path / "store"))
    build_run(settings, "r", [EPISODES, SNAPSHOTS, STATES])
    states = pd.read_parquet(tmp_path / "store" / STATES / "r")
    assert [json.loads(text) for text in states["reference_ops"]] == [
        {
            "next_version": 1,
            "ops": [{"op": "add_card", "card_id": "c2", "trigger": "t", "program": "p"}],
        },
        {"next_version": 3, "ops": [{"op": "delete_card", "card_id": "c1"}]},
        {"next_version": None, "ops": [], "note": LAST_SNAPSHOT_NOTE},
    ]


def test_states_and_prompts_tables_carry_the_same_reference_ops(workspace, instance):
    generate_runs(workspace.runs, SampleSpec(n_runs=1, n_checkpoints=4, n_cards=5, emb_dim=4))
    assert materialize_run(instance, "run000").success
    states = pd.read_parquet(workspace.store / "checkpoint_states" / "run000")
    prompts = pd.read_parquet(workspace.store / "curator_prompts" / "run000")
    assert states["reference_ops"].tolist() == prompts["reference_ops"].tolist()
    ops = [json.loads(text) for text in states["reference_ops"]]
    assert [o["next_version"] for o in ops] == [1, 2, 3, None]
    assert ops[-1]["note"] == LAST_SNAPSHOT_NOTE
    libraries = [json.loads(s)["lib_snapshot"] for s in states["state"]]
    for k in range(3):
        assert ops[k]["ops"] == card_ops(libraries[k], libraries[k + 1])
    # The state JSON itself stays the original script's: no extra field.
    assert "reference_ops" not in json.loads(states["state"].iloc[0])
