"""Exports with both sources: session states beside run states, freshness, selection."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.export.collect import collect_export, export_rows
from statepool_dagster.core.export.formats import SESSIONS_INDEX
from statepool_dagster.core.export.gate import LengthFilter, PromptCounter, char_estimate
from statepool_dagster.core.export.rows import (
    MANIFEST,
    ExportOptions,
    ExportSet,
    SourceOptions,
    split_of,
)
from statepool_dagster.core.export.write import FormatWriter, stream_export
from statepool_dagster.core.feedback.select import Selection, SelectionOptions
from statepool_dagster.core.feedback.stats_store import update_stats
from statepool_dagster.core.segments.writer import SegmentWriter
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.store.cells import TextCell
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import STATEPOOL, cli_env
from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
RUN_STATES = {f"run{r:03d}_ckpt{k}" for r in range(2) for k in range(3)}
OPTIONS = ExportOptions(val_fraction=0.0)


def _build(root: Path) -> SimpleNamespace:
    """Two runs, and two sessions: ``alpha`` (copies of run states and new states at policy
    steps 1 to 4, one without a step) and ``beta`` (one of alpha's states, one new)."""
    runs, store, sessions = root / "runs", root / "store", root / "sessions"
    generate_runs(runs, SPEC)
    settings = Settings(runs_dir=str(runs), store_dir=str(store), sessions_dir=str(sessions))
    for run in ("run000", "run001"):
        build_run(settings, run)
    pool = store / "state_pool"
    same_id = json.loads((pool / "run000" / "run000_ckpt1.json").read_text("utf-8"))
    same_content = json.loads((pool / "run001" / "run001_ckpt0.json").read_text("utf-8"))
    same_content["state_id"] = "written-elsewhere"
    with StateWriter(sessions, "alpha", writer="w") as writer:
        writer.append(same_id, policy_step=1)
        writer.append(same_content, policy_step=1)
        for k in range(1, 5):
            writer.append(generated_state(k), policy_step=k)
    # As `statepool ingest` without --policy-step seals it: a line without a step.
    (sessions / "alpha" / "segments" / "x-000000.jsonl").write_text(
        json.dumps(generated_state(9)) + "\n"
    )
    with StateWriter(sessions, "beta", writer="w") as writer:
        writer.append(generated_state(4), policy_step=7)
        writer.append(generated_state(20), policy_step=7)
    spec = settings.prompt_spec()
    for session in ("alpha", "beta"):
        build_session(sessions, store, session, spec)
    return SimpleNamespace(runs=runs, store=store, sessions=sessions, settings=settings)


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> SimpleNamespace:
    return _build(tmp_path_factory.mktemp("sources"))


def _by_id(export) -> dict:
    return {row.state_id: row for row in export.rows}


def test_session_states_join_run_states_and_a_run_state_wins(pool):
    export = collect_export(pool.store, OPTIONS)
    rows = _by_id(export)
    runs = {sid for sid, r in rows.items() if r.source == "runs"}
    assert runs == RUN_STATES
    sessions = {sid: r for sid, r in rows.items() if r.source == "sessions"}
    assert len(sessions) == 6  # alpha's 5 new states, beta's 1 new one
    assert {r.session for r in sessions.values()} == {"alpha", "beta"}
    assert all(sid.startswith("s-") and r.run is None for sid, r in sessions.items())
    assert rows["run000_ckpt1"].source == "runs"
    steps = sorted((r.session, r.policy_step or -1) for r in sessions.values())
    assert steps == [("alpha", -1), ("alpha", 1), ("alpha", 2), ("alpha", 3), ("alpha", 4),
                     ("beta", 7)]  # fmt: skip
    problems = "\n".join(export.problems)
    assert "session alpha: 1 state identical to run000's (a run state wins) left out" in problems
    assert "session alpha: 1 state identical to run001's (a run state wins) left out" in problems
    assert "session beta: 1 state identical to session alpha's left out" in problems
    assert export.summary()["duplicates_dropped"] == 3
    assert export.summary()["sessions"] == {"train": ["alpha", "beta"]}


def test_sessions_are_split_by_name_as_runs_are(pool):
    options = ExportOptions(val_fraction=0.5, seed=4)
    export = collect_export(pool.store, options)
    for row in export.rows:
        assert row.split == split_of(row.session or row.run, options)
    summary = export.summary()
    assert sorted(n for names in summary["sessions"].values() for n in names) == ["alpha", "beta"]


def test_max_staleness_keeps_the_newest_steps_of_each_session(pool):
    export = collect_export(pool.store, OPTIONS, SourceOptions(max_staleness=1))
    sessions = sorted((r.session, r.policy_step) for r in export.rows if r.session)
    assert sessions == [("alpha", 3), ("alpha", 4), ("beta", 7)]
    problems = "\n".join(export.problems)
    older = "session alpha: 2 states older than policy step 3 (--max-staleness 1) left out"
    assert older in problems
    assert "session alpha: 1 state without a policy step (--max-staleness 1) left out" in problems
    assert export.summary()["sources"] == {"sources": ["runs", "sessions"], "max_staleness": 1}


def test_sources_pick_runs_or_sessions(pool, tmp_path):
    only_sessions = collect_export(pool.store, OPTIONS, SourceOptions.parse("sessions"))
    assert {r.source for r in only_sessions.rows} == {"sessions"}
    # Without run states, no session state loses to one: alpha's copies come in.
    assert "run000_ckpt1" in _by_id(only_sessions)
    # --sources runs writes, byte for byte, the export of the same store without sessions.
    bare = tmp_path / "bare"
    shutil.copytree(pool.store, bare, ignore=shutil.ignore_patterns("session_*"))
    for fmt in ("verl", "trl", "pool"):
        stream_export(bare, {fmt: tmp_path / f"{fmt}-bare"}, OPTIONS)
        stream_export(
            pool.store, {fmt: tmp_path / fmt}, OPTIONS, sources=SourceOptions.parse("runs")
        )
        ours = {p.name: p.read_bytes() for p in (tmp_path / fmt).iterdir()}
        theirs = {p.name: p.read_bytes() for p in (tmp_path / f"{fmt}-bare").iterdir()}
        manifest = json.loads(ours.pop(MANIFEST))
        assert manifest.pop("sources") == {"sources": ["runs"], "max_staleness": None}
        assert manifest == json.loads(theirs.pop(MANIFEST))
        assert ours == theirs
    with pytest.raises(ValueError, match="a list of runs, sessions"):
        SourceOptions.parse("runs,nope")


def test_written_formats_say_where_each_state_came_from(pool, tmp_path):
    outs = {fmt: tmp_path / fmt for fmt in ("verl", "trl", "pool")}
    stream_export(pool.store, outs, OPTIONS)
    verl = pq.read_table(outs["verl"] / "train.parquet").to_pylist()
    infos = {r["extra_info"]["state_id"]: r["extra_info"] for r in verl}
    assert infos["run000_ckpt0"]["source"] == "runs" and infos["run000_ckpt0"]["session"] is None
    session_info = [i for i in infos.values() if i["source"] == "sessions"]
    assert {i["session"] for i in session_info} == {"alpha", "beta"}
    assert all(not i["has_reference_ops"] and i["run"] is None for i in session_info)
    trl = pq.read_table(outs["trl"] / "train.parquet")
    assert {"source", "session", "policy_step"} <= set(trl.column_names)
    index = (outs["pool"] / SESSIONS_INDEX).read_text("utf-8").splitlines()
    entries = [json.loads(line) for line in index]
    assert len(entries) == 6 and all((outs["pool"] / f"{e['state_id']}.json").exists()
                                     for e in entries)  # fmt: skip
    manifest = json.loads((outs["pool"] / MANIFEST).read_text("utf-8"))
    assert manifest["sessions"] == {"train": ["alpha", "beta"]}


def _feedback(store: Path, scores: dict[str, list[list[float]]]) -> None:
    """Groups of answers per state, recorded as a trainer would, then folded."""
    folder = store / "feedback"
    now = time.time() - 3600  # long closed groups
    with SegmentWriter(folder, "w") as writer:
        for sid, groups in scores.items():
            for g, group in enumerate(groups):
                for score in group:
                    writer.append({"state_id": sid, "score": score, "group": f"{sid}-{g}",
                                   "time": now, "source": "trl",
                                   "ops_match": int(score > 0.5)})  # fmt: skip
    update_stats(store, folder)


def test_selection_leaves_out_states_and_names_each(pool, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pool.store, store)
    flat = "run000_ckpt0"
    session_state = next(r.state_id for r in collect_export(store, OPTIONS).rows if r.session)
    _feedback(store, {flat: [[1.0, 1.0], [0.0, 0.0]], session_state: [[0.0, 1.0]]})
    options = SelectionOptions(drop_zero_variance=2, weight="std")
    export = collect_export(store, OPTIONS, selection=Selection.from_options(options, store))
    rows = _by_id(export)
    assert flat not in rows
    assert (
        f"state {flat} left out: its last 2 groups all had zero reward std "
        "(--drop-zero-variance 2)" in export.problems
    )
    assert rows[session_state].weight == pytest.approx(0.7071, abs=1e-3)
    # no feedback yet: the top of the scale, the largest sample std of scores in [-1, 1]
    assert rows["run000_ckpt1"].weight == pytest.approx(2**0.5)
    assert rows["run000_ckpt1"].weight >= max(r.weight for r in rows.values())
    stream_export(store, {"trl": tmp_path / "trl"}, OPTIONS, selection=options)
    table = pq.read_table(tmp_path / "trl" / "train.parquet")
    assert "weight" in table.column_names and None not in table.column("weight").to_pylist()
    manifest = json.loads((tmp_path / "trl" / MANIFEST).read_text("utf-8"))
    assert manifest["selection"]["drop_zero_variance"] == 2


def test_cli_export_with_sources_staleness_and_selection(pool, tmp_path):
    env = cli_env(SimpleNamespace(runs=pool.runs, store=pool.store), tmp_path / "home")
    done = subprocess.run(
        [str(STATEPOOL), "export", "--format", "trl", "--out", "out", "--sources", "sessions",
         "--max-staleness", "0", "--weight", "pass-rate", "--val-fraction", "0", "--json"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows"] == {"train": 2}  # alpha's step 4, beta's step 7
    assert summary["sources"] == {"sources": ["sessions"], "max_staleness": 0}
    assert "without a policy step" in done.stderr
    assert (
        "selection (--weight pass-rate): no feedback statistics yet (state_stats holds no "
        "state), so every state is kept at the unscored weight" in done.stderr
    )
    table = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert sorted(r["policy_step"] for r in table) == [4, 7]
    assert {r["weight"] for r in table} == {0.25}
    # The same rule from its variable: the export reads STATEPOOL_SELECT_* as training_dataset does.
    by_env = subprocess.run(
        [str(STATEPOOL), "export", "--format", "trl", "--out", "by_env", "--sources", "sessions",
         "--max-staleness", "0", "--val-fraction", "0", "--json"],
        env=env | {"STATEPOOL_SELECT_WEIGHT": "pass-rate"}, cwd=tmp_path, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert by_env.returncode == 0, by_env.stderr
    table = pq.read_table(tmp_path / "by_env" / "train.parquet").to_pylist()
    assert {r["weight"] for r in table} == {0.25}
    flag_wins = subprocess.run(
        [str(STATEPOOL), "export", "--format", "trl", "--out", "flag", "--sources", "sessions",
         "--max-staleness", "0", "--val-fraction", "0", "--weight", "pass-rate", "--json"],
        env=env | {"STATEPOOL_SELECT_WEIGHT": "std"}, cwd=tmp_path, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert flag_wins.returncode == 0, flag_wins.stderr
    table = pq.read_table(tmp_path / "flag" / "train.parquet").to_pylist()
    assert {r["weight"] for r in table} == {0.25}  # p(1-p) without feedback; std's would be √2
    bad = subprocess.run(
        [str(STATEPOOL), "export", "--format", "trl", "--out", "o2", "--sources", "files"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("statepool export: --sources: ")


def test_live_pool_serves_session_states_and_sees_a_new_segment(pool, tmp_path):
    from statepool_dagster.live import LivePool

    store, sessions = tmp_path / "store", tmp_path / "sessions"
    shutil.copytree(pool.store, store)
    shutil.copytree(pool.sessions, sessions)
    live = LivePool(str(store), refresh_seconds=0.0)
    rows = [live[i] for i in range(len(live))]
    assert sum(r["extra_info"]["source"] == "sessions" for r in rows) == 6
    with StateWriter(sessions, "beta", writer="w") as writer:
        writer.append(generated_state(30), policy_step=8)
    assert not live.refresh()  # sealed, but this pool reads the store only
    build_session(sessions, store, "beta", pool.settings.prompt_spec())
    assert live.refresh()  # the session's index changed
    rows = [live[i] for i in range(len(live))]
    assert sum(r["extra_info"]["source"] == "sessions" for r in rows) == 7
    assert {r["extra_info"]["session"] for r in rows} == {None, "alpha", "beta"}
    assert rows[-1]["extra_info"]["policy_step"] == 8  # the new state comes last


def test_cli_export_counts_the_duplicates_it_lists_and_score_keeps_quiet(pool, tmp_path):
    env = cli_env(SimpleNamespace(runs=pool.runs, store=pool.store), tmp_path / "home")
    done = subprocess.run(
        [str(STATEPOOL), "export", "--format", "pool", "--out", "out", "--val-fraction", "0"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = [line for line in done.stderr.splitlines() if " identical to " in line]
    assert len(listed) == 3  # one state each: alpha's two copies of run states, beta's of alpha's
    assert "3 duplicate states left out (see above)" in done.stdout
    # Grading reads the same states, a duplicate graded as its twin: no note about exports.
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"state_id": "run000_ckpt1", "completion": "[]"}) + "\n")
    scored = subprocess.run(
        [str(STATEPOOL), "score", "--completions", str(answers)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    assert scored.stderr == ""
    assert "1 answer scored in 1 group" in scored.stdout


@pytest.mark.parametrize("fmt", ["verl", "trl", "pool"])
def test_texts_left_in_arrow_write_what_their_strs_write(pool, tmp_path, fmt):
    """A run state's prompt and state go from the store to the export as Arrow's: the files
    hold byte for byte what the same rows made ``str`` write (sessions and a length limit
    among them)."""
    tokens = sorted(len(r.prompt) // 4 for r in collect_export(pool.store, OPTIONS).rows)
    limit = tokens[len(tokens) // 2]

    def lengths() -> LengthFilter:
        return LengthFilter(char_estimate(), limit)

    streamed = stream_export(pool.store, {fmt: tmp_path / "cells"}, OPTIONS, lengths=lengths())
    export = ExportSet(OPTIONS)
    rows = list(export_rows(pool.store, export, lengths()))
    assert any(isinstance(r.state, TextCell) for r in rows)
    assert export.with_sessions and any(r.session for r in rows)
    assert export.prompt_lengths["left_out"] == streamed.prompt_lengths["left_out"] != []
    (tmp_path / "strs").mkdir()
    writer = FormatWriter(fmt, tmp_path / "strs", export)
    for row in rows:
        writer.add(row.in_python())
    writer.finish(export)
    names = sorted(p.name for p in (tmp_path / "cells").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "strs").iterdir())
    for name in names:
        assert (tmp_path / "cells" / name).read_bytes() == (tmp_path / "strs" / name).read_bytes()


def test_rows_kept_from_a_batch_that_lost_others_hold_only_their_own_texts(pool):
    """A writer holds rows for a while: each must not keep the whole batch it was read in."""
    only = frozenset({"run000_ckpt1", "run001_ckpt2"})
    rows = list(export_rows(pool.store, ExportSet(OPTIONS), only=only))
    assert {row.state_id for row in rows} == only
    for row in rows:
        for cell in (row.prompt, row.state):
            assert cell.array.buffers()[2].size == len(cell.utf8())


def test_a_counter_of_ones_own_gets_each_prompt_as_a_str(pool):
    """Texts left in Arrow go only to a counter that says it takes them (``texts``)."""
    seen: list[type] = []

    def count(messages) -> int:
        seen.extend(type(m["content"]) for m in messages)
        return 1

    counter = PromptCounter("one a prompt", count, exact=True)
    rows = list(export_rows(pool.store, ExportSet(OPTIONS), LengthFilter(counter, None)))
    assert rows and set(seen) == {str} and all(r.prompt_tokens == 1 for r in rows)
    assert any(isinstance(r.prompt, TextCell) for r in rows)  # the rows keep their cells
