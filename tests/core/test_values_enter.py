"""A value its column cannot hold is refused at whichever door it enters by, and no line can
stop a sync: random values of every field through every door (the command line,
``StateWriter``, the feedback recorder, a segment another tool wrote), then a sync and the
live pool — nothing crashes, nothing good is lost."""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from statepool_dagster.cli.main import main
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.feedback.recorder import FeedbackRecorder
from statepool_dagster.core.segments import SegmentWriter
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import session_totals
from statepool_dagster.core.sessions.writer import session_line
from statepool_dagster.live import LivePool

from cli_helpers import STATEPOOL, cli_env
from instance_helpers import new_instance
from store_helpers import generated_state

INT64 = (-(2**63), 2**63 - 1)
EDGES = [-1, 0, INT64[1], INT64[1] + 1, 10**30, 99999999999999999999999, -(10**30)]
NUMBERS = st.one_of(
    st.sampled_from(EDGES),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
)


# Ids and meta: text (a lone surrogate among it, which UTF-8 cannot hold), numbers, nothing.
TEXTS = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["\ud800", "a\udfff", "ok"]),
    st.integers(),
    st.none(),
)


def storable(value) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return False
    return True


def fits_step(value) -> bool:
    return type(value) is int and 0 <= value <= INT64[1]


def fits_time(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _main(*argv: str) -> int:
    """``statepool`` in this process (its stderr kept quiet): the exit code."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return main(list(argv))
        except SystemExit as stop:
            return int(stop.code)


# No shrinking: each example is a sync; a failure's draw is printed as it is.
@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    steps=st.lists(NUMBERS, min_size=4, max_size=8),
    times=st.lists(NUMBERS, min_size=4, max_size=8),
    scores=st.lists(NUMBERS, min_size=4, max_size=8),
    texts=st.lists(TEXTS, min_size=4, max_size=8),
    ids=st.lists(TEXTS, min_size=4, max_size=8),
)
def test_random_values_through_every_door_then_sync_and_live_pool(steps, times, scores, texts, ids):
    import tempfile

    steps = [*EDGES, *steps]
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as env:
        root = Path(tmp)
        sessions, store = root / "sessions", root / "store"
        (root / "runs").mkdir()
        env.setenv("STATEPOOL_RUNS_DIR", str(root / "runs"))
        env.setenv("STATEPOOL_STORE_DIR", str(store))
        env.setenv("STATEPOOL_SESSIONS_DIR", str(sessions))
        good: set[str] = set()
        k = 0

        # StateWriter: a refused value raises, writes nothing.
        with StateWriter(sessions, "writer", writer="w") as writer:
            for step, text in zip(steps, [*texts, *texts, *texts], strict=False):
                k += 1
                ok = fits_step(step) and storable(str(text)) and storable(text)
                try:
                    writer.append(
                        generated_state(k), policy_step=step, parent_state_id=text, meta={"v": text}
                    )
                except (TypeError, ValueError) as exc:
                    assert not ok
                    assert any(f in str(exc) for f in ("policy_step", "parent_state_id", "meta"))
                else:
                    assert ok, (step, text)
                    good.add(("writer", k))

        # A segment another tool wrote: any provenance; the readers turn the bad into rejects.
        bad_lines = 0
        with SegmentWriter(sessions / "raw" / "segments", "tool", max_age=float("inf")) as raw:
            rows = zip(steps, [*times] * 4, [*texts] * 4, [*ids] * 4, strict=False)
            for step, when, text, state_id in rows:
                k += 1
                provenance = {"policy_step": step, "time": when, "parent_state_id": text}
                provenance["meta"] = {"v": text}
                state = generated_state(k)
                if isinstance(state_id, str):
                    state["state_id"] = f"{state_id}-{k}"
                # As another tool writes it: any lone surrogate escaped, as json.dumps does.
                line = json.dumps({"_statepool": provenance, **state})
                raw.append(line.encode("utf-8"))
                ok = (step is None or fits_step(step)) and (when is None or fits_time(when))
                ok = ok and (text is None or (isinstance(text, str) and storable(text)))
                ok = ok and storable(state["state_id"])
                if ok:
                    good.add(("raw", k))
                else:
                    bad_lines += 1

        # The command line: the flag refused with 2 and nothing written, else sealed.
        source = root / "states.jsonl"
        for step in steps:
            k += 1
            source.write_text(json.dumps(generated_state(k)) + "\n")
            code = _main("ingest", str(source), "--session", "cli", "--policy-step", str(step))
            try:
                given_step = int(str(step))
            except ValueError:
                given_step = None
            if fits_step(given_step):
                assert code == 0
                good.add(("cli", k))
            else:
                assert code == 2, step

        # The feedback recorder: what fits is queued, the rest named in a ValueError.
        recorder = FeedbackRecorder(str(store / "feedback"), seal_seconds=3600)
        recorded = 0
        answers = zip(scores, [*times] * 2, [*steps] * 2, [*ids] * 2, strict=False)
        for score, when, step, state_id in answers:
            state_id = f"gen-{state_id}" if isinstance(state_id, str) else "gen-1"
            item = (("g",), state_id, {"score": score}, when, "trl", step)
            ok = fits_time(score) and fits_time(when) and (step is None or fits_step(step))
            ok = ok and storable(state_id)
            try:
                recorder.queue([item])
            except ValueError as exc:
                assert not ok
                assert str(exc).split(": ")[1] in ("state_id", "score", "time", "step")
            else:
                assert ok
                recorded += 1
        recorder.close()

        def served() -> set[str]:
            live = LivePool(store, sessions=sessions, refresh_seconds=0.0)
            return set(live.state_ids())

        before = served()  # the live pool reads the sealed segments itself
        with new_instance(root / "home") as instance:
            summary = sync(instance)
        assert not summary.failed_sessions, summary.failed_sessions
        assert summary.feedback.ok and summary.feedback.records == recorded
        stored = {s: session_totals(store, s) for s in ("writer", "raw", "cli")}
        for session, built in stored.items():
            assert built.states == sum(1 for s, _ in good if s == session), session
        assert stored["raw"].rejects == bad_lines
        after = served()
        assert len(before) == len(after) == len(good)


def test_a_huge_policy_step_is_refused_at_the_door_and_a_written_one_cannot_stop_a_sync(
    workspace, tmp_path
):
    sessions = tmp_path / "sessions"
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(sessions)}
    source = tmp_path / "states.jsonl"
    source.write_text(json.dumps(generated_state(1)) + "\n")
    step = "99999999999999999999999"
    refused = subprocess.run(
        [str(STATEPOOL), "ingest", str(source), "--session", "s1b", "--policy-step", step],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "statepool ingest: --policy-step: must be at most 9223372036854775807"
    )
    assert len(refused.stderr.splitlines()) == 1 and not sessions.exists()

    # Written by another tool all the same: a reject naming segment and line, the rest built.
    with SegmentWriter(sessions / "s1b" / "segments", "tool", max_age=float("inf")) as raw:
        raw.append(session_line(generated_state(1), {"policy_step": 10**23}))
        raw.append(session_line(generated_state(2), {"policy_step": 3}))
    for _ in range(2):  # and every later sync
        done = subprocess.run(
            [str(STATEPOOL), "sync", "--json"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
    totals = session_totals(workspace.store, "s1b")
    assert (totals.states, totals.rejects, totals.policy_steps) == (1, 1, (3, 3))
    rejects = (workspace.store / "session_rejects" / "s1b").glob("*.jsonl")
    lines = [json.loads(line) for p in rejects for line in p.read_text().splitlines()]
    assert [(r["line"], r["error"].split(":")[0]) for r in lines] == [(1, "_statepool.policy_step")]
    assert lines[0]["file"].startswith("s1b/segments/tool-")


@pytest.mark.parametrize("step", [-5, 10**30, 2**63])
def test_state_writer_refuses_a_policy_step_its_column_cannot_hold(tmp_path, step):
    refused = pytest.raises(
        ValueError, match=r"^policy_step: must be (at least 0|at most 9223372036854775807)"
    )
    with StateWriter(tmp_path, "s", writer="w") as writer, refused:
        writer.append(generated_state(1), policy_step=step)
    assert not any((tmp_path / "s" / "segments").iterdir()), "nothing written"


def test_the_feedback_recorder_refuses_what_its_columns_cannot_hold(tmp_path):
    recorder = FeedbackRecorder(str(tmp_path / "fb"), seal_seconds=3600)
    good = (("g",), "gen-1", {"score": 0.5}, 1.0, "trl", 3)
    with pytest.raises(ValueError, match="step: must be"):
        recorder.queue([good, (("g",), "gen-1", {"score": 0.5}, 1.0, "trl", 10**30)])
    with pytest.raises(ValueError, match="score: must be"):
        recorder.queue([(("g",), "gen-1", {"score": float("nan")}, 1.0, "trl", 3)])
    with pytest.raises(ValueError, match="state_id: not storable"):
        recorder.queue([(("g",), "gen-\ud800", {"score": 0.5}, 1.0, "trl", 3)])
    sealed = recorder.flush()
    recorder.close()
    lines = [line for name in sealed for line in (tmp_path / "fb" / name).read_text().splitlines()]
    assert len(lines) == 1 and json.loads(lines[0])["step"] == 3, "the good one kept"


def test_a_verl_dump_with_a_huge_step_is_a_reject_not_a_crash(tmp_path):
    from statepool_dagster.core.feedback.importers import import_verl_dump

    dump = tmp_path / "dump"
    dump.mkdir()
    rows = [
        {"state_id": "a", "score": 1.0, "step": 10**30},
        {"state_id": "a", "score": 10**400},
        {"state_id": "a", "score": 0.5, "ops": 10**400},
        {"state_id": "a\ud800", "score": 0.5},
    ]
    (dump / "1.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    report = import_verl_dump(str(tmp_path / "fb"), dump)
    assert report.records == 1
    assert len(report.rejects) == 3
    assert "line 1: step: must be at most 9223372036854775807" in report.rejects[0]
    assert "line 2:" in report.rejects[1] and "score" in report.rejects[1]
    assert "line 4: state_id: not storable as UTF-8" in report.rejects[2]
