"""The drop-in module reproduces the original script byte for byte.

The original is loaded from ``<repo>/../shared/reference/statepool_seed.py``; its
``build_curator_prompt`` imports the inference side (``infer.*``), which a fake package
in ``tmp_path`` provides (see ``fake_infer`` in conftest.py).
"""

from __future__ import annotations

import dataclasses
import json
import locale
import shutil
from pathlib import Path

import pytest

from statepool_dagster import compat
from statepool_dagster.core.config import Settings
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run, generate_runs

INFER_ENV = {
    "STATEPOOL_PROMPT_TEMPLATE": "infer.curator.curator:CURATOR_PROMPT",
    "STATEPOOL_PARAM_RULE": "infer.curator.curator:PARAM_RULE_ON",
    "STATEPOOL_TOOL_SPECS": "infer.tools:TOOL_SPECS",
    "STATEPOOL_EPISODE_FORMATTER": "infer.curator.reflector:format_episodes",
}
SKIPPED_RUN, SKIPPED_VERSIONS = "run001", (2, 3)  # batches deleted: checkpoint 3 has none
LONG_RUN, NO_VERSION_RUN, EMPTY_RUN, BARE_RUN = "run_long", "run002", "run_empty", "run_bare"

ANALYSES = {
    "short": {"failure_patterns": ["p1"], "observations": ["o1"], "summary": "fine"},
    "long_non_ascii_extra_keys": {
        "summary": "résumé — 日本語の字幕 " * 40,
        "observations": [{"task": "OCR", "note": "“Café Olé” {x} {}"} for _ in range(60)],
        "failure_patterns": ["naïve guess before evidence"] * 50,
        "extra_key": "never shown",
        "another": {"nested": [1, 2, 3]},
    },
    "missing_keys": {"summary": None, "unrelated": 1},
    "empty": {},
}


def _require_utf8_locale() -> None:
    # The original opens files in text mode with the locale's encoding.
    if locale.getpreferredencoding(False).lower().replace("-", "") != "utf8":
        pytest.skip("the original script needs a UTF-8 locale to read and write these runs")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Sample runs the original script can read: every file is one it handles."""
    runs = tmp_path_factory.mktemp("equivalence") / "runs"
    spec = SampleSpec(
        n_runs=3, n_checkpoints=6, n_cards=6, emb_dim=4, episodes_per_batch=6, seed=11
    )
    generate_runs(runs, spec)
    long_spec = SampleSpec(n_checkpoints=13, n_cards=8, emb_dim=4, episodes_per_batch=4, seed=5)
    generate_run(runs / LONG_RUN, long_spec, run_index=4)
    generate_run(runs / EMPTY_RUN, SampleSpec(n_checkpoints=3, n_cards=0, emb_dim=4), run_index=1)
    (runs / BARE_RUN / "snapshots").mkdir(parents=True)  # episodes but no snapshot at all
    (runs / BARE_RUN / "episodes.jsonl").write_text('{"id": "x", "skill_lib_version": 0}\n')

    def rewrite(run: str, keep) -> None:
        path = runs / run / "episodes.jsonl"
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            record = keep(json.loads(line))
            if record is not None:
                kept.append(json.dumps(record, ensure_ascii=False))
        path.write_text("".join(k + "\n" for k in kept), encoding="utf-8")

    rewrite(SKIPPED_RUN, lambda r: None if r["skill_lib_version"] in SKIPPED_VERSIONS else r)

    def drop_version_0(record: dict) -> dict:
        if record["skill_lib_version"] == 0:
            record = {k: v for k, v in record.items() if k != "skill_lib_version"}
        return record

    rewrite(NO_VERSION_RUN, drop_version_0)
    return runs


def run_dirs(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.iterdir() if p.is_dir())


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}


@pytest.fixture(scope="module")
def pools(corpus: Path, seed_module, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Per run: the folder the original wrote and the folder compat wrote."""
    _require_utf8_locale()
    out = tmp_path_factory.mktemp("pools")
    result = {}
    for run in run_dirs(corpus):
        theirs, ours = out / "seed" / run.name, out / "ours" / run.name
        n_theirs = seed_module.collect_from_run(str(run), str(theirs))
        n_ours = compat.collect_from_run(str(run), str(ours))
        assert n_ours == n_theirs, run.name
        result[run.name] = (theirs, ours)
    return result


def test_corpus_exercises_skips_v10_ordering_empty_libraries_and_missing_versions(pools):
    assert "run001_ckpt3.json" not in files(pools[SKIPPED_RUN][0])
    assert "run001_ckpt2.json" in files(pools[SKIPPED_RUN][0])  # falls back... to batch 1
    assert "run_long_ckpt10.json" in files(pools[LONG_RUN][0])
    assert "run_long_ckpt12.json" in files(pools[LONG_RUN][0])
    empty = json.loads(files(pools[EMPTY_RUN][0])["run_empty_ckpt1.json"])
    assert empty["lib_snapshot"]["cards"] == []
    no_version = json.loads(files(pools[NO_VERSION_RUN][0])["run002_ckpt1.json"])
    assert no_version["episodes"] and all(
        "skill_lib_version" not in e for e in no_version["episodes"]
    )
    assert files(pools[BARE_RUN][0]) == {}


def test_collect_from_run_writes_the_same_files_byte_for_byte_as_the_seed(pools):
    compared = 0
    for run, (theirs, ours) in pools.items():
        seed_files, our_files = files(theirs), files(ours)
        assert sorted(our_files) == sorted(seed_files), run
        for name, data in seed_files.items():
            assert our_files[name] == data, f"{run}/{name}"
            compared += 1
    assert compared >= 25


def test_collect_from_run_returns_the_seed_count_for_every_run(corpus, seed_module, tmp_path):
    _require_utf8_locale()
    for run in run_dirs(corpus):
        expected = seed_module.collect_from_run(str(run), str(tmp_path / "s" / run.name))
        assert compat.collect_from_run(run, str(tmp_path / "o" / run.name)) == expected


def state_pairs(pools, seed_module):
    """(seed state, our state) for every state file, each read by its own module."""
    pairs = []
    for theirs, ours in pools.values():
        for path in sorted(theirs.iterdir()):
            seed_state = seed_module.CheckpointState.from_json(path.read_text(encoding="utf-8"))
            our_state = compat.CheckpointState.from_json((ours / path.name).read_bytes())
            pairs.append((seed_state, our_state))
    assert len(pairs) >= 25
    return pairs


@pytest.fixture
def infer_env(fake_infer, monkeypatch):
    def install(**kwargs) -> None:
        fake_infer(**kwargs)
        for name, value in INFER_ENV.items():
            monkeypatch.setenv(name, value)
        assert Settings.from_env().prompt_template == INFER_ENV["STATEPOOL_PROMPT_TEMPLATE"]

    return install


def test_build_curator_prompt_equals_the_seed_for_every_state_without_analysis(
    pools, seed_module, infer_env
):
    infer_env()
    for seed_state, our_state in state_pairs(pools, seed_module):
        assert our_state.analysis is None
        expected = seed_module.build_curator_prompt(seed_state, None)
        assert compat.build_curator_prompt(our_state) == expected, our_state.state_id


@pytest.mark.parametrize("kind", sorted(ANALYSES))
def test_build_curator_prompt_equals_the_seed_for_every_state_with_analysis(
    pools, seed_module, infer_env, kind
):
    infer_env()
    analysis = ANALYSES[kind]
    for seed_state, our_state in state_pairs(pools, seed_module):
        seed_state = dataclasses.replace(seed_state, analysis=json.loads(json.dumps(analysis)))
        our_state = our_state.model_copy(update={"analysis": json.loads(json.dumps(analysis))})
        expected = seed_module.build_curator_prompt(seed_state, None)
        assert compat.build_curator_prompt(our_state) == expected, our_state.state_id


def test_build_curator_prompt_uses_the_inference_side_named_by_the_env(
    pools, seed_module, infer_env
):
    # A customised inference side: the prompt only matches if the env paths are followed.
    template_file = Path(__file__).resolve().parents[2] / "statepool_dagster/core/prompts/defaults"
    template = (template_file / "curator_prompt.txt").read_text(encoding="utf-8")
    infer_env(
        template="CUSTOM HEADER {{not a field}}\n" + template,
        param_rule="- custom rule {with braces}",
        tool_specs={"only_tool": {"description": "does {x} and ünïcode"}},
        formatter_prefix="CUSTOM FORMATTER\n",
    )
    pairs = state_pairs(pools, seed_module)
    for seed_state, our_state in pairs:
        expected = seed_module.build_curator_prompt(seed_state, None)
        assert expected.startswith("CUSTOM HEADER {not a field}\n")
        assert compat.build_curator_prompt(our_state) == expected, our_state.state_id


def test_load_state_pool_reads_the_seed_pool_as_the_seed_does(pools, seed_module):
    for theirs, _ours in pools.values():
        ours = {s.state_id: s.to_dict() for s in compat.load_state_pool(theirs)}
        seed_states = seed_module.load_state_pool(str(theirs))
        assert ours == {s.state_id: dataclasses.asdict(s) for s in seed_states}


# --------------------------------------------------------------------------- independent


def test_hand_built_run_gives_the_states_written_out_by_hand(tmp_path):
    run = tmp_path / "hand_run"
    (run / "snapshots").mkdir(parents=True)
    (run / "episodes.jsonl").write_text(
        '{"id": "e1", "skill_lib_version": 0, "question": "Où? {x}", "correct": true}\n'
        '{"id": "e2", "question": "no version"}\n'
        '{"skill_lib_version": 1, "id": "e3", "extra": [1, 2.5, null]}\n'
        '{"id": "e4", "skill_lib_version": 3}\n',
        encoding="utf-8",
    )
    snapshots = {
        "skills_v0.json": '{"version": 0, "cards": []}',
        "skills_v1.json": (
            '{"version": 1, "cards": [{"card_id": "c1", "trigger": "When 日本語", '
            '"_trigger_emb": [0.1, 0.2], "program": "1. do", "meta_info": {"injected": 1, '
            '"fired": 0, "helped": 0, "harmful": 0}}], "note": "kept"}'
        ),
        "skills_v2.json": (
            '{"cards": [{"card_id": 7, "trigger": "t", "program": "p"}], "version": 2}'
        ),
        "skills_v3.json": '{"version": 3, "cards": []}',
        "skills_v5.json": '{"version": 5, "cards": []}',
    }
    for name, text in snapshots.items():
        (run / "snapshots" / name).write_text(text, encoding="utf-8")

    def expected(k: int, lib: dict, episodes: list) -> dict:
        return {
            "state_id": f"hand_run_ckpt{k}",
            "dataset": "ovo",
            "lib_snapshot": lib,
            "episodes": episodes,
            "analysis": None,
            "last_receipt": "(collected offline)",
            "followup_qids": [],
            "gt_map": {},
        }

    e1 = {"id": "e1", "skill_lib_version": 0, "question": "Où? {x}", "correct": True}
    e2 = {"id": "e2", "question": "no version"}
    e3 = {"skill_lib_version": 1, "id": "e3", "extra": [1, 2.5, None]}
    e4 = {"id": "e4", "skill_lib_version": 3}
    card1 = {
        "card_id": "c1",
        "trigger": "When 日本語",
        "program": "1. do",
        "meta_info": {"injected": 1, "fired": 0, "helped": 0, "harmful": 0},
    }
    want = {
        "hand_run_ckpt0.json": expected(0, {"version": 0, "cards": []}, [e1, e2]),
        "hand_run_ckpt1.json": expected(
            1, {"version": 1, "cards": [card1], "note": "kept"}, [e1, e2]
        ),
        "hand_run_ckpt2.json": expected(
            2, {"cards": [{"card_id": 7, "trigger": "t", "program": "p"}], "version": 2}, [e3]
        ),
        "hand_run_ckpt3.json": expected(3, {"version": 3, "cards": []}, [e4]),
    }  # checkpoint 5: no batch 4 or 5, so no state

    out = tmp_path / "out"
    assert compat.collect_from_run(str(run), str(out)) == 4
    got = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in out.iterdir()}
    assert got == want
    for name, state in want.items():  # key order too, at every level that has one
        assert json.dumps(got[name], ensure_ascii=False) == json.dumps(state, ensure_ascii=False)


# --------------------------------------------------------------------------- load order


def test_load_state_pool_orders_by_run_then_numeric_checkpoint_and_skips_temp_files(tmp_path):
    pool = tmp_path / "pool"
    pool.mkdir()
    wanted = [
        "run000_ckpt0",
        "run000_ckpt1",
        "run000_ckpt2",
        "run000_ckpt10",
        "run000_ckpt11",
        "run001_ckpt3",
        "run002_ckpt9",
        "run002_ckpt20",
    ]
    for state_id in [wanted[i] for i in (4, 7, 2, 5, 0, 3, 6, 1)]:  # written in a mixed order
        state = compat.CheckpointState(
            state_id=state_id,
            dataset="ovo",
            lib_snapshot={"version": 0, "cards": []},
            episodes=[],
            analysis=None,
            last_receipt="(collected offline)",
        )
        (pool / f"{state_id}.json").write_text(state.to_json(), encoding="utf-8")
    (pool / ".run000_ckpt5.json.tmp-0123456789ab").write_text("{half-writ", encoding="utf-8")
    (pool / ".run000_ckpt6.json").write_text("{also a temp", encoding="utf-8")
    (pool / "README.txt").write_text("not a state", encoding="utf-8")
    assert [s.state_id for s in compat.load_state_pool(pool)] == wanted
    assert [s.state_id for s in compat.load_state_pool(str(pool))] == wanted


def test_load_state_pool_of_a_missing_folder_is_empty_like_the_seed(tmp_path, seed_module):
    missing = tmp_path / "never_created"
    assert seed_module.load_state_pool(str(missing)) == []
    assert compat.load_state_pool(str(missing)) == []


def test_load_state_pool_reads_what_collect_from_run_wrote(tmp_path, corpus):
    out = tmp_path / "pool"
    compat.collect_from_run(corpus / LONG_RUN, str(out))
    got = [s.state_id for s in compat.load_state_pool(out)]
    assert got == [f"run_long_ckpt{k}" for k in range(13)]
    shutil.rmtree(out)
