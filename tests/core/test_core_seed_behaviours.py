"""The original script's behaviours, one test each, on run folders written by hand."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest

from statepool_dagster import compat
from statepool_dagster.core.config import Settings
from statepool_dagster.core.prompts.render import build_curator_prompt
from statepool_dagster.core.prompts.spec import PromptLimits, PromptSpec
from statepool_dagster.core.prompts.template import format_episodes
from statepool_dagster.core.runs.snapshots import list_snapshots
from statepool_dagster.core.stages.collect import read_run
from statepool_dagster.core.states.models import CheckpointState


def card(card_id: str, trigger: str = "when t", program: str = "do p", **extra: Any) -> dict:
    return {
        "card_id": card_id,
        "trigger": trigger,
        "program": program,
        "meta_info": {"injected": 1, "fired": 1, "helped": 1, "harmful": 0},
        **extra,
    }


def lib(version: int, *cards: dict) -> dict:
    return {"version": version, "cards": list(cards)}


def ep(eid: str, version: int | None = None, **extra: Any) -> dict:
    record: dict[str, Any] = {"id": eid, "question": f"question {eid}", **extra}
    if version is not None:
        record["skill_lib_version"] = version
    return record


def ids(state: CheckpointState) -> list[str]:
    return [e["id"] for e in state.episodes]


def states_by_version(run_dir: Path, **kwargs: Any) -> dict[int, CheckpointState]:
    return {j.version: j.state for j in read_run(run_dir, **kwargs).states}


def only(template: str, **limits: int) -> PromptSpec:
    """A spec whose template shows one part, so a test sees exactly that part."""
    return PromptSpec(
        template=template,
        param_rule="RULE",
        tool_specs={"t": {"description": "d"}},
        episode_formatter=format_episodes,
        limits=PromptLimits(**limits),
    )


def state(lib_snapshot: dict, episodes: list[dict] | None = None, analysis=None) -> CheckpointState:
    return CheckpointState(
        state_id="r_ckpt1",
        dataset="ovo",
        lib_snapshot=lib_snapshot,
        episodes=episodes if episodes is not None else [ep("e1", 0)],
        analysis=analysis,
        last_receipt="(collected offline)",
    )


# --------------------------------------------------------------------------- batch pairing


def test_checkpoint_k_pairs_with_the_batch_of_version_k_minus_1(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("a", 0), ep("b", 1), ep("c", 1), ep("d", 2)],
        {"skills_v1.json": lib(1), "skills_v2.json": lib(2)},
    )
    got = states_by_version(run)
    assert ids(got[1]) == ["a"]
    assert ids(got[2]) == ["b", "c"]


def test_checkpoint_k_falls_back_to_batch_k_when_k_minus_1_is_missing(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("a", 0), ep("c", 2), ep("d", 2)],
        {"skills_v0.json": lib(0), "skills_v2.json": lib(2)},
    )
    joined = {j.version: j for j in read_run(run).states}
    assert ids(joined[0].state) == ["a"]  # no version -1: its own batch
    assert ids(joined[2].state) == ["c", "d"]
    assert joined[2].batch_version == 2


def test_checkpoint_without_batch_k_minus_1_or_k_is_skipped_with_reason(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("a", 0), ep("b", 1)],
        {"skills_v1.json": lib(1), "skills_v3.json": lib(3)},
    )
    read = read_run(run)
    assert [j.version for j in read.states] == [1]
    assert [(s.version, s.reason) for s in read.skipped] == [
        (3, "no episodes with skill_lib_version 2 or 3")
    ]
    out = tmp_path / "out"
    assert compat.collect_from_run(run, str(out)) == 1
    assert sorted(p.name for p in out.iterdir()) == ["r_ckpt1.json"]


def test_missing_skill_lib_version_counts_as_version_0(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("no_version_1"), ep("explicit_0", 0), ep("no_version_2"), ep("v1", 1)],
        {"skills_v1.json": lib(1)},
    )
    assert ids(states_by_version(run)[1]) == ["no_version_1", "explicit_0", "no_version_2"]


# --------------------------------------------------------------------------- snapshot files


def test_snapshots_are_ordered_numerically_v2_before_v10(tmp_path, write_run):
    versions_written = [10, 2, 11, 0, 1, 9, 3]  # created in a mixed order
    run = write_run(
        tmp_path,
        "r",
        [ep(f"e{v}", v) for v in range(12)],
        {f"skills_v{v}.json": lib(v) for v in versions_written},
    )
    listed = [s.version for s in list_snapshots(run / "snapshots").snapshots]
    assert listed == [0, 1, 2, 3, 9, 10, 11]
    assert [j.version for j in read_run(run).states] == [0, 1, 2, 3, 9, 10, 11]


def test_bak_and_vfinal_files_are_ignored_with_a_reason_and_make_no_state(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("a", 2), ep("b", 3)],
        {
            "skills_v3.json": lib(3, card("real")),
            "skills_v3.bak.json": lib(3, card("backup")),
            "skills_vfinal.json": lib(99, card("final")),
        },
    )
    read = read_run(run)
    assert set(read.ignored) == {"skills_v3.bak.json", "skills_vfinal.json"}
    assert all(reason for reason in read.ignored.values())
    assert [j.state.state_id for j in read.states] == ["r_ckpt3"]
    assert [c["card_id"] for c in read.states[0].state.lib_snapshot["cards"]] == ["real"]
    out = tmp_path / "out"
    assert compat.collect_from_run(run, str(out)) == 1
    assert sorted(p.name for p in out.iterdir()) == ["r_ckpt3.json"]


def test_trigger_emb_is_removed_from_every_card(tmp_path, write_run):
    cards = [card(f"c{i}", _trigger_emb=[0.1 * i, -0.5, 1.0]) for i in range(3)]
    cards.append(card("no_emb"))
    run = write_run(tmp_path, "r", [ep("a", 0)], {"skills_v1.json": lib(1, *cards)})
    out = tmp_path / "out"
    compat.collect_from_run(run, str(out))
    text = (out / "r_ckpt1.json").read_text(encoding="utf-8")
    assert "_trigger_emb" not in text
    got = json.loads(text)["lib_snapshot"]["cards"]
    assert [c["card_id"] for c in got] == ["c0", "c1", "c2", "no_emb"]


def test_unknown_fields_and_key_order_survive_embedding_removal(tmp_path, write_run):
    snapshot = {
        "zeta": "first key",
        "cards": [
            {
                "program": "do p",
                "_trigger_emb": [0.5, 0.5],
                "card_id": "c1",
                "x_custom": {"nested": [1, 2.5, None, True]},
                "trigger": "when t",
                "meta_info": {"harmful": 2, "extra_counter": 7, "injected": 1},
            }
        ],
        "version": 1,
        "alpha": ["last key"],
    }
    episode = {"z_last": 1, "skill_lib_version": 0, "a_first": {"k": "v"}, "id": "e"}
    run = write_run(tmp_path, "r", [episode], {"skills_v1.json": snapshot})
    out = tmp_path / "out"
    compat.collect_from_run(run, str(out))
    got = json.loads((out / "r_ckpt1.json").read_text(encoding="utf-8"))
    library = got["lib_snapshot"]
    assert list(library) == ["zeta", "cards", "version", "alpha"]
    assert library["alpha"] == ["last key"]
    assert list(library["cards"][0]) == ["program", "card_id", "x_custom", "trigger", "meta_info"]
    assert library["cards"][0]["x_custom"] == {"nested": [1, 2.5, None, True]}
    assert list(library["cards"][0]["meta_info"]) == ["harmful", "extra_counter", "injected"]
    assert got["episodes"] == [episode]
    assert list(got["episodes"][0]) == ["z_last", "skill_lib_version", "a_first", "id"]


# --------------------------------------------------------------------------- text survives


def test_non_ascii_text_is_written_unescaped_in_state_json(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("e", 0, question="Où est la clé? 日本語の字幕 — “Café”")],
        {"skills_v1.json": lib(1, card("c1", trigger="naïve crème brûlée 🍮"))},
    )
    out = tmp_path / "out"
    compat.collect_from_run(run, str(out))
    data = (out / "r_ckpt1.json").read_bytes()
    for text in ("Où est la clé? 日本語の字幕 — “Café”", "naïve crème brûlée 🍮"):
        assert text.encode("utf-8") in data
    assert b"\\u" not in data


def test_non_ascii_text_is_kept_in_the_prompt():
    s = state(
        lib(1, card("c1", trigger="日本語の字幕", program="crème brûlée")),
        episodes=[ep("e", 0, question="¿dónde está la llave?")],
    )
    prompt = build_curator_prompt(s)
    assert "When: 日本語の字幕" in prompt
    assert "Do: crème brûlée" in prompt
    assert "¿dónde está la llave?" in prompt


def test_braces_in_card_text_and_questions_do_not_break_str_format():
    s = state(
        lib(1, card("c{0}", trigger="slot {x} and {}", program="print('{}'.format(n)) {name!r}")),
        episodes=[ep("e", 0, question="f(x) = {x + 1}; Batch {}: done {{")],
    )
    prompt = build_curator_prompt(s)
    assert "- [c{0}]" in prompt
    assert "When: slot {x} and {}" in prompt
    assert "Do: print('{}'.format(n)) {name!r}" in prompt
    assert "f(x) = {x + 1}; Batch {}: done {{" in prompt


# --------------------------------------------------------------------------- analysis block


def test_analysis_block_shows_only_failure_patterns_observations_summary():
    analysis = {
        "summary": "S",
        "secret_extra": "must not appear",
        "failure_patterns": ["fp1"],
        "observations": {"o": 1},
    }
    block = build_curator_prompt(state(lib(1), analysis=analysis), only("{analysis_block}"))
    assert json.loads(block) == {
        "failure_patterns": ["fp1"],
        "observations": {"o": 1},
        "summary": "S",
    }
    assert list(json.loads(block)) == ["failure_patterns", "observations", "summary"]
    assert "secret_extra" not in block
    assert block.startswith('{\n "failure_patterns": [\n  "fp1"\n ]')  # indent=1


def test_analysis_block_shows_null_for_a_missing_key():
    block = build_curator_prompt(state(lib(1), analysis={"summary": "S"}), only("{analysis_block}"))
    assert json.loads(block) == {"failure_patterns": None, "observations": None, "summary": "S"}


def test_analysis_block_is_cut_at_4000_chars():
    analysis = {"failure_patterns": ["x" * 100] * 100, "observations": [], "summary": "end"}
    full = json.dumps(
        {k: analysis[k] for k in ("failure_patterns", "observations", "summary")}, indent=1
    )
    assert len(full) > 4000
    block = build_curator_prompt(state(lib(1), analysis=analysis), only("{analysis_block}"))
    assert len(block) == 4000
    assert block == full[:4000]


def test_analysis_block_keeps_non_ascii_unescaped():
    analysis = {"failure_patterns": ["日本語"], "observations": "naïve", "summary": "“ok”"}
    block = build_curator_prompt(state(lib(1), analysis=analysis), only("{analysis_block}"))
    assert "日本語" in block and "naïve" in block and "“ok”" in block
    assert "\\u" not in block


def test_without_analysis_the_block_is_raw_episodes_then_formatter_output():
    episodes = [ep("e1", 0, correct=True), ep("e2", 0, correct=False)]
    block = build_curator_prompt(state(lib(1), episodes=episodes), only("{analysis_block}"))
    assert block == "## Raw episodes\n" + format_episodes(episodes)


def test_raw_episodes_are_cut_at_5000_chars_after_the_heading():
    def long_formatter(episodes: list[dict]) -> str:
        return "".join(string.ascii_letters[i % 52] for i in range(7000))

    spec = only("{analysis_block}").model_copy(update={"episode_formatter": long_formatter})
    block = build_curator_prompt(state(lib(1)), spec)
    assert block == "## Raw episodes\n" + long_formatter([])[:5000]


# --------------------------------------------------------------------------- truncation limits


def test_trigger_is_cut_at_150_chars():
    trigger = "".join(chr(ord("a") + i % 26) for i in range(400))
    catalog = build_curator_prompt(
        state(lib(1, card("c1", trigger=trigger))), only("{skill_catalog}")
    )
    assert f"  When: {trigger[:150]}\n" in catalog
    assert trigger[:151] not in catalog


def test_program_is_cut_at_200_chars():
    program = "".join(chr(ord("A") + i % 26) for i in range(400))
    catalog = build_curator_prompt(
        state(lib(1, card("c1", program=program))), only("{skill_catalog}")
    )
    assert catalog.endswith(f"  Do: {program[:200]}")
    assert program[:201] not in catalog


def test_catalog_entry_shows_counters_then_cut_texts():
    c = card("c7", trigger="T", program="P")
    c["meta_info"] = {"injected": 4, "fired": 3, "helped": 2, "harmful": 1}
    bare = {"card_id": 8, "trigger": "T2", "program": "P2"}  # no meta_info: zeros
    catalog = build_curator_prompt(state(lib(1, c, bare)), only("{skill_catalog}"))
    assert catalog == (
        "- [c7] inj=4 fired=3 helped=2 harmful=1\n  When: T\n  Do: P\n"
        "- [8] inj=0 fired=0 helped=0 harmful=0\n  When: T2\n  Do: P2"
    )


def test_limits_are_configurable_through_prompt_limits():
    s = state(
        lib(1, card("c1", trigger="t" * 50, program="p" * 50)),
        analysis={"summary": "s" * 100},
    )
    spec = only(
        "{skill_catalog}|{analysis_block}|{max_ops}",
        trigger_chars=5,
        program_chars=7,
        analysis_chars=12,
        max_ops=9,
    )
    catalog, block, max_ops = build_curator_prompt(s, spec).split("|")
    assert "  When: ttttt\n" in catalog and catalog.endswith("  Do: ppppppp")
    shown = {"failure_patterns": None, "observations": None, "summary": "s" * 100}
    assert block == json.dumps(shown, indent=1)[:12]
    assert max_ops == "9"
    raw = build_curator_prompt(state(lib(1)), only("{analysis_block}", episodes_chars=4))
    assert raw == "## Raw episodes\n" + format_episodes(state(lib(1)).episodes)[:4]


def test_limits_are_configurable_through_statepool_env_settings():
    environ = {
        "STATEPOOL_TRIGGER_CHARS": "3",
        "STATEPOOL_PROGRAM_CHARS": "4",
        "STATEPOOL_ANALYSIS_CHARS": "5",
        "STATEPOOL_EPISODES_CHARS": "6",
        "STATEPOOL_MAX_OPS": "7",
    }
    spec = Settings.from_env(environ=environ).prompt_spec()
    assert spec.limits == PromptLimits(
        trigger_chars=3, program_chars=4, analysis_chars=5, episodes_chars=6, max_ops=7
    )
    prompt = build_curator_prompt(
        state(lib(1, card("c1", trigger="abcdef", program="ABCDEF"))), spec
    )
    assert "  When: abc\n" in prompt
    assert "  Do: ABCD\n" in prompt
    assert "at most 7 operations" in prompt


def test_max_ops_defaults_to_3():
    assert PromptLimits().max_ops == 3
    assert Settings.from_env(environ={}).max_ops == 3
    assert build_curator_prompt(state(lib(1)), only("{max_ops}")) == "3"
    assert "Propose at most 3 operations" in build_curator_prompt(state(lib(1)))


@pytest.mark.parametrize("library", [{"version": 4, "cards": []}, {"version": 4}])
def test_library_without_cards_is_shown_as_empty_library(library):
    prompt = build_curator_prompt(state(library), only("{skill_catalog}|{n_cards}|{version}"))
    assert prompt == "(empty library)|0|4"


def test_library_without_version_shows_version_0():
    assert build_curator_prompt(state({"cards": []}), only("{version}")) == "0"


# --------------------------------------------------------------------------- state fields


def test_state_fields_default_to_the_seed_values(tmp_path, write_run):
    run = write_run(tmp_path, "run_7", [ep("a", 0)], {"skills_v1.json": lib(1)})
    out = tmp_path / "out"
    compat.collect_from_run(run, str(out))
    got = json.loads((out / "run_7_ckpt1.json").read_text(encoding="utf-8"))
    assert list(got) == [
        "state_id",
        "dataset",
        "lib_snapshot",
        "episodes",
        "analysis",
        "last_receipt",
        "followup_qids",
        "gt_map",
    ]
    assert got["state_id"] == "run_7_ckpt1"
    assert got["dataset"] == "ovo"
    assert got["analysis"] is None
    assert got["last_receipt"] == "(collected offline)"
    assert got["followup_qids"] == []
    assert got["gt_map"] == {}


def test_dataset_is_configurable(tmp_path, write_run):
    run = write_run(tmp_path, "r", [ep("a", 0)], {"skills_v1.json": lib(1)})
    out = tmp_path / "out"
    compat.collect_from_run(run, str(out), dataset="egoschema")
    assert json.loads((out / "r_ckpt1.json").read_bytes())["dataset"] == "egoschema"
    assert read_run(run, dataset="mvbench").states[0].state.dataset == "mvbench"
    assert Settings.from_env(environ={"STATEPOOL_DATASET": "x"}).dataset == "x"
    assert Settings.from_env(environ={}).dataset == "ovo"


def test_run_dir_with_trailing_slash_keeps_the_run_name(tmp_path, write_run):
    run = write_run(tmp_path, "r9", [ep("a", 0)], {"skills_v1.json": lib(1)})
    out = tmp_path / "out"
    compat.collect_from_run(str(run) + "/", str(out))
    assert [p.name for p in out.iterdir()] == ["r9_ckpt1.json"]


def test_zero_padded_snapshot_name_counts_as_its_number_like_the_seed(tmp_path, write_run):
    run = write_run(tmp_path, "r", [ep("a", 2)], {"skills_v03.json": lib(3, card("padded"))})
    assert [j.state.state_id for j in read_run(run).states] == ["r_ckpt3"]


def test_zero_padded_duplicate_of_a_version_is_ignored_for_the_canonical_name(tmp_path, write_run):
    run = write_run(
        tmp_path,
        "r",
        [ep("a", 2)],
        {"skills_v03.json": lib(3, card("padded")), "skills_v3.json": lib(3, card("canonical"))},
    )
    read = read_run(run)
    assert list(read.ignored) == ["skills_v03.json"]
    assert "duplicate" in read.ignored["skills_v03.json"]
    (joined,) = read.states
    assert [c["card_id"] for c in joined.state.lib_snapshot["cards"]] == ["canonical"]
