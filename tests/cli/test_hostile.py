"""Hostile run folders through the real ``statepool`` command: no hang, no crash, no silent change.

Each test drives the CLI as a subprocess against real files in ``tmp_path``: FIFOs,
sockets, symlinks (out of the run, in a loop, to a device), odd snapshot names,
values only Python's json reads, and a real SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statepool_dagster.core.runs.json_read import DEPTH_LIMIT
from statepool_dagster.core.stages.run import STOP_GRACE_SECONDS
from statepool_dagster.demo.sample_runs import generate_run

from broken_runs import SPEC
from cli_helpers import cli_env
from hostile_runs import SECRET, build_hostile_corpus
from store_helpers import store_pool

STATEPOOL = Path(sys.executable).with_name("statepool")


@pytest.fixture
def hostile(workspace):
    return build_hostile_corpus(workspace.runs, workspace.root / "outside")


def _run(workspace, tmp_path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(STATEPOOL), *args],
        env=cli_env(workspace, tmp_path / "home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,  # a hang fails the test instead of stalling it
    )


def _rejects(store: Path, run: str) -> dict[tuple[str, int | None], str]:
    path = store / "rejects" / f"{run}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {(r["file"], r["line"]): r["error"] for r in rows}


def _store_text(store: Path) -> str:
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace") for p in store.rglob("*") if p.is_file()
    )


def test_hostile_corpus_syncs_in_seconds_with_every_problem_named(
    hostile, workspace, tmp_path, seed
):
    started = time.monotonic()
    done = _run(workspace, tmp_path, "sync", "--json")
    assert time.monotonic() - started < 120
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] == 0
    by_run = {r["run"]: r for r in report["runs"]}
    assert set(by_run) == {p.name for p in workspace.runs.iterdir()}

    for run, expected in hostile.rejects.items():
        got = _rejects(workspace.store, run)
        assert set(got) == set(expected), run
        for where, fragment in expected.items():
            assert fragment in got[where], (where, got[where])
        assert by_run[run]["rejects"] == len(expected)

    # snapshot names the project does not read: listed with their reason, counted on the CLI
    assert by_run["odd_names"]["ignored"] == len(hostile.ignored["odd_names"])
    assert by_run["py_json"]["ignored"] == 0
    table = _run(workspace, tmp_path, "status", "--json")
    status = {row["run"]: row for row in json.loads(table.stdout)["runs"]}
    assert status["odd_names"]["ignored_files"] == 6

    # nothing read through a link out of the run: its text is nowhere in the store or output
    assert SECRET not in _store_text(workspace.store)
    assert SECRET not in done.stdout + done.stderr

    # where the original succeeds, the states are its own bytes
    for run in hostile.seed_equal:
        out = tmp_path / "seed" / run
        seed.collect_from_run(str(workspace.runs / run), str(out))
        expected = {p.name: p.read_bytes() for p in out.glob("*.json")}
        assert expected and store_pool(workspace.store)[run] == expected


def test_sync_table_lists_ignored_files_per_run(hostile, workspace, tmp_path):
    done = _run(workspace, tmp_path, "sync")
    assert done.returncode == 0, done.stderr
    assert "odd_names: 4 states, 6 ignored files" in done.stderr
    assert "ignored files per run: fuzz_kept=2, fuzz_rejects=1, odd_names=6" in done.stdout


SLOW_FORMATTER = """
import os, time
def slow(episodes):
    with open(os.environ["MARK"], "a") as f:
        f.write(f"{time.time()}\\n")
    time.sleep(120)
    return "never"
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_sync_promptly_without_retries_and_nothing_torn(workspace, tmp_path, signum):
    for i in range(3):
        generate_run(workspace.runs / f"run{i}", SPEC, i)
    formatter = tmp_path / "slow_fmt.py"
    formatter.write_text(SLOW_FORMATTER, encoding="utf-8")
    mark = tmp_path / "mark.txt"
    env = cli_env(workspace, tmp_path / "home")
    env.update(STATEPOOL_EPISODE_FORMATTER=f"{formatter}:slow", MARK=str(mark))
    sync = subprocess.Popen(
        [str(STATEPOOL), "sync"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():  # the batch's Dagster run is rendering a prompt
            assert sync.poll() is None, sync.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1)  # every worker of the batch has started its prompt
        sent, sent_at = time.monotonic(), time.time()
        sync.send_signal(signum)
        _, stderr = sync.communicate(timeout=30)
    finally:
        if sync.poll() is None:
            sync.kill()
    assert time.monotonic() - sent < 30
    assert sync.returncode == 128 + signum, stderr
    assert f"stopped by {signal.Signals(signum).name}" in stderr
    # no retry run by run: no prompt started after the signal, but for the stage's pool
    # handing a pending run to a worker before the grace time's kill (see core/stages/run.py)
    started = [float(line) for line in mark.read_text().splitlines()]
    assert started and max(started) < sent_at + STOP_GRACE_SECONDS
    # nothing torn: no temporary file left in the store, every table readable
    leftovers = [p for p in workspace.store.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    import pyarrow.parquet as pq

    for table in workspace.store.rglob("*.parquet"):
        pq.read_table(table)

    # the next sync (a quick formatter) finishes the job
    env.pop("STATEPOOL_EPISODE_FORMATTER")
    done = subprocess.run(
        [str(STATEPOOL), "sync", "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failed"] == 0
    assert sorted(store_pool(workspace.store)) == ["run0", "run1", "run2"]


def test_fifo_episodes_file_never_blocks_the_sync(workspace, tmp_path):
    generate_run(workspace.runs / "fifo", SPEC, 3)
    (workspace.runs / "fifo" / "episodes.jsonl").unlink()
    os.mkfifo(workspace.runs / "fifo" / "episodes.jsonl")
    generate_run(workspace.runs / "loop", SPEC, 4)
    episodes = workspace.runs / "loop" / "episodes.jsonl"
    episodes.unlink()
    episodes.symlink_to(episodes)
    done = _run(workspace, tmp_path, "sync", "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    fifo = _rejects(workspace.store, "fifo")
    assert "FIFO" in fifo[("fifo/episodes.jsonl", None)]
    loop = _rejects(workspace.store, "loop")
    assert "symlink loop" in loop[("loop/episodes.jsonl", None)]


def test_card_fields_keep_the_state_and_set_only_its_prompt_aside(workspace, tmp_path, seed):
    run = workspace.runs / "cards"
    generate_run(run, SPEC, 9)
    path = run / "snapshots" / "skills_v1.json"
    library = json.loads(path.read_bytes())
    library["cards"][0]["trigger"] = 5  # the original writes the state, fails on its prompt
    path.write_text(json.dumps(library), encoding="utf-8")
    done = _run(workspace, tmp_path, "sync", "--json")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "seed"
    seed.collect_from_run(str(run), str(out))
    assert store_pool(workspace.store)["cards"] == {
        p.name: p.read_bytes() for p in out.glob("*.json")
    }
    rejects = [
        json.loads(line)
        for line in (workspace.store / "rejects" / "cards.jsonl").read_text("utf-8").splitlines()
    ]
    prompt_rejects = [r for r in rejects if r["source"] == "prompts"]
    assert prompt_rejects and all(
        "trigger is not a string (got int)" in r["error"] for r in prompt_rejects
    )
    assert json.loads(done.stdout)["runs"][0]["rejects"] == len(prompt_rejects)


def test_a_template_or_formatter_failing_for_some_states_sets_only_their_prompts_aside(
    workspace, tmp_path
):
    from statepool_dagster import load_prompts

    run = workspace.runs / "fits"
    generate_run(run, SPEC, 3)
    path = run / "snapshots" / "skills_v1.json"
    library = json.loads(path.read_bytes())
    library["version"] = "1"  # the original keeps it; "{version:05d}" cannot show it
    path.write_text(json.dumps(library), encoding="utf-8")
    (tmp_path / "t.txt").write_text("{version:05d}\n{analysis_block}", encoding="utf-8")
    (tmp_path / "fmt.py").write_text(
        "def show(episodes):\n"
        "    if any(e.get('skill_lib_version') == 2 for e in episodes):\n"
        "        raise ValueError('batch 2 is not for me')\n"
        "    if any(e.get('skill_lib_version') == 1 for e in episodes):\n"
        "        return 'a lone \\ud800'\n"  # a str, but not one a table can store
        "    return str(len(episodes))\n",
        encoding="utf-8",
    )
    env = cli_env(workspace, tmp_path / "home")
    env["STATEPOOL_PROMPT_TEMPLATE"] = str(tmp_path / "t.txt")
    env["STATEPOOL_EPISODE_FORMATTER"] = f"{tmp_path / 'fmt.py'}:show"
    done = subprocess.run(
        [str(STATEPOOL), "sync", "--json"], env=env, cwd=tmp_path, capture_output=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    errors = sorted(_rejects(workspace.store, "fits").values())
    assert errors == [
        "fits_ckpt1: cannot render the prompt: placeholder {version:05d}: "
        "ValueError: Unknown format code 'd' for object of type 'str'",
        "fits_ckpt2: cannot store the prompt: not storable as UTF-8: "
        "a lone surrogate '\\ud800' at character 29",
        "fits_ckpt3: cannot render the prompt: "
        "episode formatter show raised ValueError: batch 2 is not for me",
    ]
    prompts = load_prompts(workspace.store)
    assert dict(zip(prompts["state_id"], prompts["prompt"], strict=True)) == {
        "fits_ckpt0": "00000\n## Raw episodes\n3",
    }


def _nested(depth: int) -> bytes:
    """A JSON value that makes its line nest ``depth`` deep as the value of a top-level key."""
    return b"[" * (depth - 1) + b"]" * (depth - 1)


def test_nesting_at_the_limit_is_the_originals_state_and_one_deeper_a_reject(
    workspace, tmp_path, seed
):
    """The depth limit sits under the original's own: what is kept, it writes byte for byte.

    The original runs as a script (its own shallow stack, as users run it): called inside
    pytest its recursion limit would be hit sooner.
    """
    for run, depth in (("deep_kept", DEPTH_LIMIT), ("deep_rejected", DEPTH_LIMIT + 1)):
        generate_run(workspace.runs / run, SPEC, 27)
        path = workspace.runs / run / "episodes.jsonl"
        lines = path.read_bytes().splitlines()
        lines.insert(1, b'{"id": "deep", "skill_lib_version": 0, "x": ' + _nested(depth) + b"}")
        path.write_bytes(b"\n".join(lines) + b"\n")
        snapshot = workspace.runs / run / "snapshots" / "skills_v2.json"
        snapshot.write_bytes(snapshot.read_bytes()[:-1] + b', "x": ' + _nested(depth) + b"}")

    done = _run(workspace, tmp_path, "sync", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failed"] == 0

    kept = tmp_path / "kept_runs"
    kept.mkdir()
    (kept / "deep_kept").symlink_to(workspace.runs / "deep_kept")
    out = tmp_path / "seed_out"
    original = subprocess.run(
        [sys.executable, seed.__file__, str(kept), str(out)], capture_output=True, text=True
    )
    assert original.returncode == 0, original.stderr
    expected = {p.name: p.read_bytes() for p in out.glob("*.json")}
    assert len(expected) == 4 and store_pool(workspace.store)["deep_kept"] == expected
    assert not (workspace.store / "rejects" / "deep_kept.jsonl").exists()

    too_deep = f"nested {DEPTH_LIMIT + 1} levels deep (the limit is {DEPTH_LIMIT})"
    assert _rejects(workspace.store, "deep_rejected") == {
        ("deep_rejected/episodes.jsonl", 2): too_deep,
        ("deep_rejected/snapshots/skills_v2.json", None): too_deep,
    }


def test_run_folder_names_reach_the_terminal_escaped(workspace, tmp_path):
    """A folder name's newline or escape sequence never splits a line or drives the terminal."""
    generate_run(workspace.runs / "good", SPEC, 0)
    for name in ("run\nnl", "run\x1b[31mred", "run\rcr"):
        (workspace.runs / name).mkdir()
        (workspace.runs / name / "episodes.jsonl").write_bytes(b"{}\n")
    done = _run(workspace, tmp_path, "sync")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr
    assert "\r" not in done.stdout + done.stderr
    summary = [line for line in done.stderr.splitlines() if line.startswith("runs: ")]
    assert summary == [
        "runs: 1 new run, 0 changed, 0 unchanged, 3 invalid names:"
        " `run\\nnl`, `run\\rcr`, `run\\x1b[31mred`"
    ]
