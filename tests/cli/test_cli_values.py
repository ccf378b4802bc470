"""Every numeric flag of ``statepool`` checks its range at the door: a value outside it
exits 2 naming the flag and the range, before anything is written; a value inside it is
accepted. The flags are found in the real parser, so a new one cannot skip its range."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statepool_dagster.cli.main import build_parser
from statepool_dagster.core.config import Settings
from statepool_dagster.core.feedback.select import SelectionOptions

from cli_helpers import STATEPOOL, cli_env

# What each command needs besides the flag under test.
REQUIRED = {
    "export": ["--format", "verl", "--out", "out"],
    "ingest": ["states.jsonl", "--session", "s"],
    "score": ["--completions", "answers.jsonl"],
}
UNBOUNDED = {("export", "--seed")}  # any integer seeds the split


def _ranged_flags() -> list[tuple[str, str, type, float | None, float | None]]:
    """``(command, flag, int or float, low, high)`` for every numeric flag of the parser."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for command, parser in sub.choices.items():
        for action in parser._actions:
            flag = action.option_strings[-1] if action.option_strings else None
            kind = action.type
            if flag is None or kind is None or flag == "--difficulty-band":
                continue
            if (command, flag) in UNBOUNDED:
                assert kind is int
                continue
            assert hasattr(kind, "bounds"), f"statepool {command} {flag}: a number with no range"
            found.append((command, flag, int if kind.__name__ == "int" else float, *kind.bounds))
    return found


FLAGS = _ranged_flags()


def _parse(argv: list[str]) -> tuple[int, str]:
    """argparse's exit code (0: parsed) and what it printed to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            build_parser().parse_args(argv)
        except SystemExit as stop:
            return int(stop.code), err.getvalue()
    return 0, err.getvalue()


def test_the_numeric_flags_found_are_the_ones_expected():
    assert {(c, f) for c, f, *_ in FLAGS} >= {
        ("ingest", "--policy-step"),
        ("export", "--val-fraction"),
        ("export", "--test-fraction"),
        ("export", "--max-prompt-tokens"),
        ("export", "--max-staleness"),
        ("export", "--drop-zero-variance"),
        ("sync", "--settle"),
        ("demo", "--settle"),
    }


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_numeric_flag_accepts_its_range_and_rejects_the_rest(data):
    command, flag, kind, low, high = data.draw(st.sampled_from(FLAGS))
    if kind is int:
        value = data.draw(st.integers(min_value=-(10**6), max_value=10**6))
    else:
        value = data.draw(st.floats(allow_nan=True, allow_infinity=True, width=32))
    inside = math.isfinite(value) and (low is None or value >= low)
    inside = inside and (high is None or value <= high)
    code, err = _parse([command, *REQUIRED.get(command, []), f"{flag}={value!r}"])
    if inside:
        assert code == 0, err
    else:
        assert code == 2
        assert err.startswith(f"statepool {command}: {flag}: must be ") and f"{low:g}" in err, err
        assert len(err.splitlines()) == 1, "one line, as every refusal"


@given(
    band_on=st.sampled_from(["match", "score"]),
    lo=st.floats(min_value=-3, max_value=3),
    hi=st.floats(min_value=-3, max_value=3),
)
def test_a_band_must_lie_in_its_rules_scale(band_on, lo, hi):
    low, high = (0.0, 1.0) if band_on == "match" else (-1.0, 1.0)
    ok = low <= lo <= hi <= high
    try:
        SelectionOptions(difficulty_band=(lo, hi), band_on=band_on)
    except ValueError as exc:
        assert not ok and str(exc).startswith("--difficulty-band")
        assert "LO above HI" in str(exc) or f"{low:g} to {high:g}" in str(exc)
    else:
        assert ok
    env = {
        "STATEPOOL_SELECT_DIFFICULTY_BAND": f"{lo!r},{hi!r}",
        "STATEPOOL_SELECT_BAND_ON": band_on,
    }
    try:
        Settings.from_env(env)
    except ValueError as exc:
        assert not ok and "select_difficulty_band" in str(exc)
    else:
        assert ok


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["ingest", "states.jsonl", "--session", "s", "--policy-step", "-1"], "--policy-step"),
        (["export", "--format", "verl", "--out", "out", "--difficulty-band", "0", "5"], "0 to 1"),
        (
            [
                "export",
                "--format",
                "verl",
                "--out",
                "out",
                "--band-on",
                "score",
                "--difficulty-band",
                "-2",
                "0.5",
            ],
            "-1 to 1",
        ),
        (["export", "--format", "verl", "--out", "out", "--drop-zero-variance", "0"], "1 to 16"),
    ],
)
def test_the_command_refuses_a_value_out_of_range_and_writes_nothing(
    workspace, tmp_path, argv, named
):
    env = cli_env(workspace, tmp_path / "home")
    env["STATEPOOL_SESSIONS_DIR"] = str(tmp_path / "sessions")
    (tmp_path / "states.jsonl").write_text(json.dumps({"state_id": "a"}) + "\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run(
        [str(STATEPOOL), *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    flag = next(
        a
        for a in argv
        if a.startswith("--") and a not in ("--format", "--out", "--session", "--band-on")
    )
    assert flag in done.stderr and named in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing written"


def test_a_setting_out_of_range_names_its_variable(workspace, tmp_path):
    env = cli_env(workspace, tmp_path / "home")
    env["STATEPOOL_SELECT_DROP_ZERO_VARIANCE"] = "17"
    done = subprocess.run(
        [str(STATEPOOL), "export", "--format", "verl", "--out", "out"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "STATEPOOL_SELECT_DROP_ZERO_VARIANCE" in done.stderr and "16" in done.stderr
    assert not (tmp_path / "out").exists()
