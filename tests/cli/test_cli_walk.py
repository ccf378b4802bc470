"""Every ``statepool`` command walked through what a new user gets wrong — a store that does
not exist, a file that does not exist, a folder given for a file, a reader that closes
standard output — and its exit code is the one the command-line page states."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.cli.main import CLOSED_STDOUT, build_parser
from statepool_dagster.demo.sample_runs import SampleSpec
from statepool_dagster.live import LivePool
from statepool_dagster.trainers.cursor import DrawOrder
from statepool_dagster.trainers.trl import _save_cursor

from cli_helpers import STATEPOOL, cli_env
from process_helpers import REPO
from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=2, n_cards=3, emb_dim=4, episodes_per_batch=2)
COMMANDS = sorted(
    next(a for a in build_parser()._actions if a.dest == "command").choices
)  # fmt: skip


@pytest.fixture(scope="module")
def synced(synced_store, tmp_path_factory) -> Path:
    """A root with runs/ and a synced store/, copied by each test that writes."""
    root = tmp_path_factory.mktemp("walk")
    shutil.copytree(
        synced_store(SPEC).parent, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("home")
    )
    order = DrawOrder(LivePool(root / "store"), weighted=False, seed=0)
    order.next()
    (root / "checkpoint-1").mkdir()
    _save_cursor(root / "checkpoint-1", order.state_dict())  # a TRL checkpoint, for lineage
    return root


@pytest.fixture
def root(synced, tmp_path) -> Path:
    here = tmp_path / "here"
    shutil.copytree(synced, here, ignore=shutil.ignore_patterns("home"))
    (here / "states.jsonl").write_text(json.dumps(generated_state(1)) + "\n")
    (here / "scores.jsonl").write_text(json.dumps({"state_id": "a", "score": 1.0}) + "\n")
    (here / "answers.jsonl").write_text(json.dumps({"state_id": "a", "completion": "[]"}) + "\n")
    (here / "folder").mkdir()
    return here


def _run(root: Path, *args: str, stdout=subprocess.PIPE, **env: str):
    where = SimpleNamespace(runs=root / "runs", store=root / "store")
    full = {**cli_env(where, root.parent / "home"), "STATEPOOL_SESSIONS_DIR": str(root / "s")}
    return subprocess.run(
        [str(STATEPOOL), *args],
        env={**full, **env},
        cwd=root,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )


def _refused(done, *names: str) -> str:
    """Exit 2 with one line, ``statepool <command>: <what>: <why>``, naming ``names``."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    command = lines[0].split(":")[0]
    assert command.startswith("statepool ") and command.split()[1] in COMMANDS, lines[0]
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


# A store that does not exist: refused by every command that reads one (2); sync and demo
# make it (0), as feedback does for what it records and ingest for its rejects.
MISSING_STORE = {
    "status": [],
    "export": ["--format", "verl", "--out", "o"],
    "report": [],
    "score": ["--completions", "answers.jsonl"],
    "lineage": ["checkpoint-1"],
}


@pytest.mark.parametrize("command", sorted(MISSING_STORE))
def test_a_command_reading_the_store_refuses_a_missing_one(root, command):
    done = _run(root, command, *MISSING_STORE[command], "--store", str(root / "nostore"))
    _refused(done, "--store", str(root / "nostore"))
    assert not (root / "nostore").exists() and not (root / "o").exists()


def test_sync_and_feedback_make_a_missing_store(root):
    done = _run(root, "sync", "-q", "--store", str(root / "new_store"))
    assert done.returncode == 0, done.stderr
    assert (root / "new_store" / "state_pool").is_dir()
    done = _run(root, "feedback", "--from-scores", "scores.jsonl", "--store", str(root / "fb"))
    assert done.returncode == 0, done.stderr
    assert (root / "fb" / "feedback").is_dir()


def test_every_command_reading_the_store_takes_store():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        flags = {flag for action in parser._actions for flag in action.option_strings}
        assert "--store" in flags, name


# A file that does not exist, and a folder where a file belongs: 2, one line naming it.
FILE_ARGS = {
    "ingest": lambda f: [f, "--session", "s"],
    "score": lambda f: ["--completions", f],
    "feedback": lambda f: ["--from-scores", f],
    "export": lambda f: ["--format", "verl", "--out", "o", "--tokenizer", f],
}


@pytest.mark.parametrize("command", sorted(FILE_ARGS))
def test_a_missing_file_is_refused_in_one_line(root, command):
    _refused(_run(root, command, *FILE_ARGS[command]("nothing.jsonl")), "nothing.jsonl")


@pytest.mark.parametrize("command", sorted(set(FILE_ARGS) - {"export"}))  # a tokenizer: a folder
def test_a_folder_for_a_file_is_refused_and_called_a_folder(root, command):
    line = _refused(_run(root, command, *FILE_ARGS[command]("folder")), "folder")
    assert "a folder" in line or "not a file" in line, line


def test_ingest_given_a_folder_says_it_is_a_folder(root):
    line = _refused(_run(root, "ingest", "folder", "--session", "s"))
    assert line == f"statepool ingest: {root / 'folder'}: a folder, not a JSONL file"


def test_export_refuses_an_out_whose_parent_is_missing_unless_asked(root):
    out = root / "no" / "such" / "x"
    line = _refused(_run(root, "export", "--format", "verl", "--out", str(out)), "--out")
    assert "does not exist" in line and "--parents" in line
    assert not (root / "no").exists()
    done = _run(root, "export", "--format", "verl", "--out", str(out), "--parents")
    assert done.returncode == 0, done.stderr
    assert (out / "train.parquet").is_file() or any(out.iterdir())


# Standard output closed before the command writes (`statepool status --json | head -c 0`):
# no traceback, and the exit code the command-line page gives it.
CLOSED = {
    "status": ["--json"],
    "sync": ["--json"],
    "export": ["--format", "verl", "--out", "o", "--json"],
    "report": [],
    "score": ["--completions", "answers.jsonl", "--json"],
    "feedback": ["--from-scores", "scores.jsonl", "--json"],
    "ingest": ["states.jsonl", "--session", "s"],
    "demo": ["--json"],
    "lineage": ["checkpoint-1", "--json"],
}


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if c == "demo" else c for c in sorted(CLOSED)],
)
def test_a_closed_stdout_ends_the_command_quietly(root, command):
    assert set(CLOSED) == set(COMMANDS)
    read, write = os.pipe()
    os.close(read)
    try:
        done = _run(root, command, *CLOSED[command], stdout=write)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == CLOSED_STDOUT, done.stderr


def test_the_command_line_page_states_the_closed_stdout_exit_code():
    page = (REPO / "docs" / "reference" / "command-line.md").read_text(encoding="utf-8")
    assert f"{CLOSED_STDOUT} when standard output was closed" in page


def test_every_command_and_flag_has_help():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    for name, parser in sub.choices.items():
        assert helps.get(name) and parser.description == helps[name], name
        for action in parser._actions:
            assert action.help, (name, action.option_strings or action.dest)
