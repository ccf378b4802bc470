"""Curator answers parsed, checked, applied and scored: properties over generated runs."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statepool_dagster.core.config import Settings
from statepool_dagster.core.errors import StatepoolError
from statepool_dagster.core.names import STATES
from statepool_dagster.core.prompts.spec import load_tool_specs
from statepool_dagster.core.rewards import Vocabulary, apply_ops, parse_ops
from statepool_dagster.core.rewards.grader import Grader
from statepool_dagster.core.rewards.score import Weights
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.states.models import CheckpointState
from statepool_dagster.core.states.reference_ops import card_ops
from statepool_dagster.core.store.parts import RunTable
from statepool_dagster.core.store.schemas import SCHEMAS
from statepool_dagster.demo.sample_runs import SNAPSHOT_RE, SampleSpec, generate_runs

SPEC = SampleSpec(n_runs=3, n_checkpoints=6, n_cards=5, emb_dim=2, episodes_per_batch=2)
VOCABULARY = Vocabulary.from_tool_specs(load_tool_specs(None))
GRADER = Grader(VOCABULARY, max_ops=3, weights=Weights())
HYPOTHESIS = settings(max_examples=60)


def _library(path: Path) -> dict:
    """A snapshot as a state holds it: the cards without their embeddings."""
    library = json.loads(path.read_text(encoding="utf-8"))
    for card in library["cards"]:
        card.pop("_trigger_emb", None)
    return library


def _transitions(runs: Path) -> list[tuple[dict, dict]]:
    pairs = []
    for run in sorted(runs.iterdir()):
        snapshots = sorted(
            (int(SNAPSHOT_RE.fullmatch(p.name).group(1)), p)
            for p in (run / "snapshots").iterdir()
            if SNAPSHOT_RE.fullmatch(p.name)
        )
        for (_, before), (_, after) in itertools.pairwise(snapshots):
            pairs.append((_library(before), _library(after)))
    return pairs


# Hypothesis's strategies need the states before any fixture runs: made once, at import.
def _module_transitions() -> list[tuple[dict, dict]]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        generate_runs(Path(folder) / "runs", SPEC)
        return _transitions(Path(folder) / "runs")


TRANSITIONS = _module_transitions()
CHANGING = [t for t in TRANSITIONS if card_ops(*t)]


def state_for(library: dict) -> CheckpointState:
    return CheckpointState(
        state_id="run000_v1",
        dataset="ovo",
        lib_snapshot=library,
        episodes=[],
        analysis=None,
        last_receipt="",
    )


def grade(answer: str, library: dict, reference: list | None):
    return GRADER.grade(answer, state_for(library), reference)


def as_answer(ops: list[dict]) -> list[dict]:
    """Reference ops as a curator writes them: no id on a new card."""
    return [
        {k: v for k, v in op.items() if not (op["op"] == "add_card" and k == "card_id")}
        for op in ops
    ]


def test_generated_runs_change_their_libraries():
    assert len(CHANGING) >= 5
    kinds = {op["op"] for t in CHANGING for op in card_ops(*t)}
    assert kinds == {"add_card", "update_card", "delete_card"}


def test_applying_reference_ops_gives_the_next_snapshots_cards():
    for library, next_library in TRANSITIONS:
        applied = apply_ops(library, card_ops(library, next_library), VOCABULARY)

        def texts(lib):
            return [(c["card_id"], c["trigger"], c["program"]) for c in lib["cards"]]

        assert texts(applied) == texts(next_library)
        assert applied["version"] == library["version"] + 1


def test_the_states_stage_stores_each_checkpoints_ops_from_the_snapshot_files(tmp_path):
    """The stage indexes a library's cards once for the two states that use it, keeping a few
    libraries decoded: over a run longer than it keeps, every state's ops are still those of
    its own library and the next, read from the files."""
    runs, store = tmp_path / "runs", tmp_path / "store"
    spec = SampleSpec(n_runs=1, n_checkpoints=12, n_cards=5, emb_dim=2, episodes_per_batch=2)
    generate_runs(runs, spec)
    (run,) = sorted(runs.iterdir())
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), run.name)
    table = RunTable(store / STATES / run.name, SCHEMAS[STATES])
    stored = table.read(["version", "reference_ops"]).to_pylist()
    table.close()
    snapshots = {
        int(SNAPSHOT_RE.fullmatch(p.name).group(1)): _library(p)
        for p in (run / "snapshots").iterdir()
        if SNAPSHOT_RE.fullmatch(p.name)
    }
    assert len(stored) == len(snapshots) == spec.n_checkpoints
    changed = 0
    for row in stored:
        k, ops = row["version"], json.loads(row["reference_ops"])
        if k + 1 in snapshots:
            assert ops == {"next_version": k + 1, "ops": card_ops(snapshots[k], snapshots[k + 1])}
            changed += bool(ops["ops"])
        else:
            assert ops["ops"] == [] and ops["next_version"] is None
    assert changed >= 3


def test_new_cards_without_ids_continue_the_librarys_numbering():
    for library, next_library in TRANSITIONS:
        ops = as_answer(card_ops(library, next_library))
        applied = apply_ops(library, ops, VOCABULARY)
        assert [c["card_id"] for c in applied["cards"]] == [
            c["card_id"] for c in next_library["cards"]
        ]


def test_apply_keeps_counters_on_rewrite_and_leaves_the_input_alone():
    library, _ = CHANGING[0]
    before = json.dumps(library)
    card = library["cards"][0]
    applied = apply_ops(
        library,
        [{"op": "update_card", "card_id": card["card_id"], "program": "1. new"}],
        VOCABULARY,
    )
    assert applied["cards"][0]["meta_info"] == card["meta_info"]
    assert applied["cards"][0]["program"] == "1. new"
    assert json.dumps(library) == before


@HYPOTHESIS
@given(pair=st.sampled_from(CHANGING), data=st.data())
def test_reference_ops_score_top_in_any_order_and_wrapping(pair, data):
    library, next_library = pair
    reference = card_ops(library, next_library)
    ops = data.draw(st.permutations(as_answer(reference)))
    before = data.draw(st.text(max_size=80))
    after = data.draw(st.text(alphabet=st.characters(blacklist_characters="[{"), max_size=80))
    fence = data.draw(st.sampled_from(["{}", "```json\n{}\n```", "```\n{}\n```"]))
    body = json.dumps(data.draw(st.sampled_from([ops, {"ops": ops}])), ensure_ascii=False)
    answer = before + "\n" + fence.replace("{}", body) + "\n" + after
    assert grade(json.dumps(reference), library, reference).score == 1.0
    assert grade(answer, library, reference).score == 1.0


@HYPOTHESIS
@given(pair=st.sampled_from([t for t in CHANGING if len(card_ops(*t)) >= 1]), data=st.data())
def test_dropping_an_op_lowers_the_score(pair, data):
    library, next_library = pair
    reference = card_ops(library, next_library)
    dropped = data.draw(st.integers(0, len(reference) - 1))
    fewer = [op for i, op in enumerate(reference) if i != dropped]
    full = grade(json.dumps(reference), library, reference).score
    assert grade(json.dumps(fewer), library, reference).score < full


@HYPOTHESIS
@given(pair=st.sampled_from(CHANGING), kind=st.sampled_from(["update_card", "delete_card"]))
def test_an_op_on_a_card_that_does_not_exist_is_penalised(pair, kind):
    library, next_library = pair
    reference = card_ops(library, next_library)
    ghost = {"op": kind, "card_id": "c9999", "program": "1. x"}
    clean = grade(json.dumps(reference), library, reference)
    haunted = grade(json.dumps([*reference, ghost]), library, reference)
    assert haunted.score < clean.score
    assert haunted.invalid_ops == 1
    assert any("c9999" in p for p in haunted.problems)


def test_doing_nothing_scores_below_any_partly_right_answer():
    for library, next_library in CHANGING:
        reference = card_ops(library, next_library)
        empty = grade("[]", library, reference).score
        for op in reference:
            assert grade(json.dumps([op]), library, reference).score > empty
        assert empty > grade("no list here", library, reference).score


def test_an_empty_answer_to_an_empty_reference_scores_top():
    library = TRANSITIONS[0][0]
    assert grade("[]", library, []).score == 1.0
    assert grade('[{"op": "delete_card", "card_id": "c0000"}]', library, []).score < 1.0


def test_without_a_reference_agreement_is_left_out_not_zero():
    library = TRANSITIONS[0][0]
    result = grade("[]", library, None)
    assert result.agreement is None and result.score == 1.0
    assert result.breakdown()["has_reference"] == 0.0


@HYPOTHESIS
@given(text=st.text(max_size=400))
def test_arbitrary_text_gets_a_score(text):
    library, next_library = CHANGING[0]
    result = grade(text, library, card_ops(library, next_library))
    assert isinstance(result.score, float)
    assert -1.0 <= result.score <= 1.0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["op", "name", "card_id", "trigger", "program", "ops", "arguments", "x"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@HYPOTHESIS
@given(value=JSON, fenced=st.booleans())
def test_arbitrary_json_gets_a_score(value, fenced):
    library, next_library = CHANGING[0]
    text = json.dumps(value)
    result = grade(
        f"```json\n{text}\n```" if fenced else text, library, card_ops(library, next_library)
    )
    assert -1.0 <= result.score <= 1.0
    assert set(result.breakdown()) >= {"score", "format", "validity", "agreement"}


@pytest.mark.parametrize(
    ("text", "ops"),
    [
        ('[{"op": "delete_card", "card_id": "c1"}]', [{"op": "delete_card", "card_id": "c1"}]),
        ('{"ops": []}', []),
        (
            'I think c1 is stale.\n```json\n[{"op": "delete_card", "card_id": "c1"}]\n```',
            [{"op": "delete_card", "card_id": "c1"}],
        ),
        (
            'first [] then [{"op": "delete_card", "card_id": "c2"}]',
            [{"op": "delete_card", "card_id": "c2"}],
        ),
        (
            '{"name": "delete_card", "arguments": "{\\"card_id\\": \\"c1\\"}"}',
            [{"op": "delete_card", "card_id": "c1"}],
        ),
        (
            '[{"type": "function", "function": {"name": "add_card", '
            '"arguments": {"trigger": "t", "program": "p"}}}]',
            [{"op": "add_card", "trigger": "t", "program": "p"}],
        ),
        (
            '<tool_call>{"name": "delete_card", "arguments": {"card_id": "c1"}}</tool_call>\n'
            '<tool_call>{"name": "delete_card", "arguments": {"card_id": "c2"}}</tool_call>',
            [{"op": "delete_card", "card_id": "c1"}, {"op": "delete_card", "card_id": "c2"}],
        ),
    ],
)
def test_the_parser_reads_what_curators_write(text, ops):
    assert parse_ops(text).ops == ops


@pytest.mark.parametrize(
    ("text", "reason"),
    [("", "empty answer"), ("ok, nothing to do", "no JSON list"), ("[1, 2]", "no JSON list")],
)
def test_a_parse_failure_is_a_value_with_its_reason(text, reason):
    parsed = parse_ops(text)
    assert parsed.ops is None and reason in parsed.reason


def test_violations_are_named():
    library = TRANSITIONS[0][0]
    card = library["cards"][0]["card_id"]
    ops = [
        {"op": "rename_card", "card_id": card},
        {"op": "add_card", "trigger": "t"},
        {"op": "update_card", "card_id": card},
        {"op": "delete_card", "card_id": 7.5},
        {"op": "delete_card", "card_id": card},
        {"op": "update_card", "card_id": card, "program": "1. x"},
    ]
    problems = " | ".join(grade(json.dumps(ops), library, []).problems)
    for expected in (
        "unknown op 'rename_card'",
        "required parameter 'program' missing",
        "changes nothing",
        "'card_id' is not a string",
        "already changed by another op",
    ):
        assert expected in problems


def test_the_budget_is_max_ops_or_the_references_length():
    library, next_library = max(CHANGING, key=lambda t: len(card_ops(*t)))
    reference = card_ops(library, next_library)
    deletes = [{"op": "delete_card", "card_id": c["card_id"]} for c in library["cards"]]
    result = grade(json.dumps(deletes), library, reference)
    budget = max(3, len(reference))
    assert result.invalid_ops == max(0, len(deletes) - budget)


def test_tool_specs_in_json_schema_form_give_the_same_vocabulary():
    specs = {
        "rewrite": {
            "description": "Rewrite a card.",
            "effect": "update",
            "parameters": {
                "type": "object",
                "properties": {
                    "card_id": {"type": "string"},
                    "program": {"type": "string"},
                },
                "required": ["card_id", "program"],
            },
        },
        "merge_cards": {
            "description": "Merge cards.",
            "params": {"card_ids": "list of string", "trigger": "string", "program": "string"},
        },
    }
    vocabulary = Vocabulary.from_tool_specs(specs)
    assert vocabulary.ops["rewrite"].required == ("card_id", "program")
    assert vocabulary.ops["merge_cards"].effect == "merge"
    library = TRANSITIONS[0][0]
    ids = [c["card_id"] for c in library["cards"][:2]]
    merged = apply_ops(
        library,
        [{"op": "merge_cards", "card_ids": ids, "trigger": "both", "program": "1. both"}],
        vocabulary,
    )
    assert [c["card_id"] for c in merged["cards"]] == [
        c["card_id"] for c in library["cards"] if c["card_id"] != ids[1]
    ]
    assert merged["cards"][0]["trigger"] == "both"


def _module(tmp_path: Path, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))


def test_a_parser_and_an_outcome_hook_are_swapped_in_by_settings(tmp_path, monkeypatch):
    _module(
        tmp_path,
        "team_hooks",
        "import json\n"
        "def parse(text):\n"
        "    if text.startswith('DEL '):\n"
        "        return [{'op': 'delete_card', 'card_id': text[4:]}]\n"
        "    raise ValueError('cannot read ' + text)\n"
        "def outcome(next_library, state):\n"
        "    return len(next_library['cards']) / 10 + len(state.followup_qids)\n",
    )
    try:
        settings_ = Settings.from_env(
            {},
            ops_parser="team_hooks:parse",
            outcome_scorer="team_hooks:outcome",
            reward_outcome_weight=0.5,
        )
        grader = Grader.from_settings(settings_)
        library = TRANSITIONS[0][0]
        card = library["cards"][0]["card_id"]
        result = grader.grade(f"DEL {card}", state_for(library), None)
        assert result.outcome == pytest.approx((len(library["cards"]) - 1) / 10)
        failed = grader.grade("anything", state_for(library), None)
        assert failed.score == -1.0 and "ValueError: cannot read anything" in failed.problems[0]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("team_hooks", None)


def test_an_addition_may_name_its_new_cards_id_even_when_the_specs_declare_it():
    specs = load_tool_specs(None)
    specs["add_card"]["params"] = {"card_id": "string (optional)", **specs["add_card"]["params"]}
    grader = Grader(Vocabulary.from_tool_specs(specs), max_ops=3, weights=Weights())
    library, next_library = next(
        t for t in CHANGING if any(op["op"] == "add_card" for op in card_ops(*t))
    )
    reference = card_ops(library, next_library)
    result = grader.grade(json.dumps(reference), state_for(library), reference)
    assert result.score == 1.0 and not result.problems


def test_the_trainer_module_imports_no_dagster():
    code = (
        "import sys\n"
        "import statepool_dagster.rewards\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'torch'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_answer_with_no_valid_op_scores_like_doing_nothing_and_skips_the_hook():
    calls = []

    def outcome(next_library, state):
        calls.append(len(next_library["cards"]))
        return 1.0

    grader = Grader(VOCABULARY, 3, Weights(), outcome_hook=outcome, outcome_name="test")
    library, next_library = CHANGING[0]
    reference = card_ops(library, next_library)
    ghosts = json.dumps([{"op": "delete_card", "card_id": "c9999"}])
    for answer in ("[]", ghosts):
        assert grader.grade(answer, state_for(library), reference).score == 0.0
    assert calls == []
    assert grader.grade(json.dumps(reference), state_for(library), reference).outcome == 1.0
    assert calls == [len(next_library["cards"])]


def test_an_outcome_hook_must_return_a_finite_number():
    grader = Grader(
        VOCABULARY, 3, Weights(), outcome_hook=lambda lib, st: float("nan"), outcome_name="nan"
    )
    library = TRANSITIONS[0][0]
    with pytest.raises(StatepoolError, match="outcome scorer nan on state run000_v1 returned nan"):
        grader.grade("[]", state_for(library), [])


@pytest.mark.parametrize(
    ("hook", "said"),
    [
        (lambda lib, st: 1 / 0, "ZeroDivisionError: division by zero"),
        (lambda lib, st: "high", "ValueError: could not convert string to float: 'high'"),
    ],
)
def test_an_outcome_hook_that_raises_is_named_with_its_error(hook, said):
    grader = Grader(VOCABULARY, 3, Weights(), outcome_hook=hook, outcome_name="mine")
    library = TRANSITIONS[0][0]
    with pytest.raises(StatepoolError) as raised:
        grader.grade("[]", state_for(library), [])
    assert str(raised.value) == f"outcome scorer mine on state run000_v1 failed: {said}"
    assert type(raised.value.__cause__).__name__ == said.split(":")[0]


def _any_ops(library: dict) -> st.SearchStrategy[list[dict]]:
    ids = st.sampled_from([c["card_id"] for c in library["cards"]] + ["c9999"])
    texts = st.text(max_size=30)
    op = st.one_of(
        st.builds(lambda t, p: {"op": "add_card", "trigger": t, "program": p}, texts, texts),
        st.builds(lambda i, p: {"op": "update_card", "card_id": i, "program": p}, ids, texts),
        st.builds(lambda i: {"op": "delete_card", "card_id": i}, ids),
        st.builds(lambda i: {"op": "rename_card", "card_id": i}, ids),
    )
    return st.lists(op, max_size=6)


@HYPOTHESIS
@given(pair=st.sampled_from(CHANGING), data=st.data())
def test_any_answer_scores_the_same_in_any_order(pair, data):
    library, next_library = pair
    reference = card_ops(library, next_library)
    ops = data.draw(_any_ops(library))
    shuffled = data.draw(st.permutations(ops))
    first = grade(json.dumps(ops), library, reference)
    second = grade(json.dumps(shuffled), library, reference)
    assert first.breakdown() == second.breakdown()
    assert sorted(first.problems) == sorted(second.problems)
