"""What the command line says reads right: counts in the singular for one, plain-text help,
and the default local folders kept out of git."""

from __future__ import annotations

import argparse
import json
import subprocess

from statepool_dagster.cli.main import build_parser
from statepool_dagster.core.config import Settings
from statepool_dagster.core.words import plural

from cli_helpers import STATEPOOL, cli_env
from process_helpers import REPO


def test_plural_says_one_in_the_singular():
    assert [plural(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert plural(1, "bad line") == "1 bad line" and plural(3, "copy", "copies") == "3 copies"


def test_every_help_is_plain_text():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, text in [("statepool", parser.format_help())] + [
        (name, p.format_help()) for name, p in sub.choices.items()
    ]:
        assert "`" not in text and ":class:" not in text and "**" not in text, name
    done = subprocess.run([str(STATEPOOL), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "``" not in done.stdout and "sync" in done.stdout


def test_the_default_local_folders_are_git_ignored():
    defaults = Settings.model_fields
    folders = [defaults[f].default for f in ("runs_dir", "store_dir", "sessions_dir")]
    for folder in folders:
        path = f"{folder.removeprefix('./')}/some/file.jsonl"
        done = subprocess.run(
            ["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, timeout=60
        )
        assert done.returncode == 0, f"{path} is not git-ignored"


def test_feedback_and_ingest_count_one_in_the_singular(workspace, tmp_path):
    env = cli_env(workspace, tmp_path / "home")
    env["STATEPOOL_SESSIONS_DIR"] = str(tmp_path / "sessions")
    scores = tmp_path / "scores.json"
    row = {"line": 1, "state_id": "s1", "score": 0.5, "breakdown": {}, "ops_match": None}
    scores.write_text(json.dumps({"rows": [row]}))
    done = subprocess.run(
        [str(STATEPOOL), "feedback", "--from-scores", str(scores), "--fold"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1 record from 1 file into" in done.stdout and "(1 segment, 0 rejects)" in done.stdout
    assert "state_stats: 1 state, 1 new segment (1 record, 0 bad lines)" in done.stdout
