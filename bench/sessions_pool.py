"""A session pool end to end (issue 24): 8 writers, sync, export, beside the run path.

python bench/sessions_pool.py [--states 100000] [--writers 8] [--checkpoints 50]
                              [--out DIR] [--doc docs/performance/sessions.md] [--no-runs]
                              [--append-kb 100] [--append-rate 0] [--grow-states 200]

Every figure is a child process timed from outside (``measure.Bench.run``: wall time,
``ru_maxrss`` with its children):

- *write*: ``--writers`` processes append ``--states`` small generated states into one
  session with ``StateWriter`` (segments sealed on size and on ``close``);
- ``statepool sync`` from a fresh instance and store (empty runs folder): the sealed
  segments into ``session_states`` / ``session_prompts``;
- ``statepool report`` (its sessions section) and ``statepool export --format verl``;
- the run path on the same number of states: the huge corpus's shape (10 cards × 16-d,
  batches of 8) as ``--states / --checkpoints`` runs of ``--checkpoints`` checkpoints,
  ``statepool sync`` and ``statepool export --format verl``;
- ``bench/sessions_append.py`` (8 writers, ``--append-kb`` states) and
  ``bench/sessions_grow.py`` (one new segment on 10 against 100 segments).

Prints one JSON line; ``--doc`` writes the Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from measure import REPO, Bench, Measure, last_json, statepool

sys.path.insert(0, str(REPO))
from statepool_dagster.core.sessions import StateWriter

SESSION = "bench"
ALL_TRAIN = ("--val-fraction", "0", "--test-fraction", "0")
TARGET_MB = 500


def small_state(k: int) -> dict:
    """A small generated state: 10 cards, one episode (about 1.5 KB of JSON)."""
    cards = [
        {"card_id": f"c{i}", "trigger": f"when {k % 97} " * 4, "program": f"do {i} " * 6}
        for i in range(10)
    ]
    return {
        "state_id": f"gen-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": cards},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}", "correct": k % 3 == 0}],
        "analysis": None,
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }


def _writer(root: str, index: int, writers: int, states: int) -> None:
    with StateWriter(root, SESSION, writer=f"w{index}", max_records=5_000, fsync=False) as w:
        for k in range(index, states, writers):
            w.append(small_state(k), policy_step=k // 1_000)


def write_session(root: str, writers: int, states: int) -> None:
    """``writers`` processes append ``states`` states between them."""
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(target=_writer, args=(root, i, writers, states)) for i in range(writers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"writer exited with {p.exitcode}")


def _fresh(bench: Bench, name: str, runs: Path, sessions: Path) -> dict[str, str]:
    env = bench.fresh_env(name, runs)
    env["STATEPOOL_SESSIONS_DIR"] = str(sessions)
    return env


def _row(step: str, measure: Measure, states: int) -> dict:
    return {
        "step": step,
        "states": states,
        "seconds": round(measure.seconds, 2),
        "states_per_s": round(states / measure.seconds, 1),
        "peak_rss_mb": round(measure.peak_rss_mb),
    }


def sessions_path(bench: Bench, out: Path, args: argparse.Namespace) -> list[dict]:
    sessions, runs = out / "sessions", out / "no_runs"
    shutil.rmtree(sessions, ignore_errors=True)
    runs.mkdir(parents=True, exist_ok=True)
    n = args.states
    argv = [sys.executable, __file__, "--write-only", str(sessions), "--states", str(n)]
    argv += ["--writers", str(args.writers)]
    rows = [_row(f"write, {args.writers} writer processes", bench.run("write", argv), n)]
    env = _fresh(bench, "sessions", runs, sessions)
    rows.append(_row("session: `statepool sync`", bench.run("sync", statepool("sync"), env), n))
    read = [sys.executable, __file__, "--read-only", env["STATEPOOL_STORE_DIR"]]
    measure = bench.run("r", read, env)
    if int(measure.stdout.split()[-1]) != n:
        raise SystemExit(f"the session holds {measure.stdout.split()[-1]} states, not {n}")
    rows.append(_row("session: states and prompts read in batches", measure, n))
    report = bench.run("report", statepool("report"), env)
    rows.append(_row("session: `statepool report`", report, n))
    # One session is one split unit: every state in train (the run path is exported alike).
    export = statepool(
        "export", "--format", "verl", "--out", str(out / "session_export"), *ALL_TRAIN
    )
    rows.append(_row("session: `statepool export --format verl`", bench.run("x", export, env), n))
    return rows


def read_session(store: str) -> int:
    """Every stored state and prompt of the session, a batch at a time; the states seen."""
    from statepool_dagster.core.export.sessions import iter_session_table

    count = sum(b.num_rows for b in iter_session_table(store, SESSION, "states", ["state"]))
    prompts = sum(b.num_rows for b in iter_session_table(store, SESSION, "prompts", ["prompt"]))
    if count != prompts:
        raise SystemExit(f"{count} states but {prompts} prompts")
    return count


def runs_path(bench: Bench, out: Path, args: argparse.Namespace) -> list[dict]:
    from shapes import generate_corpus

    from statepool_dagster.demo.sample_runs import SampleSpec

    n_runs = max(1, args.states // args.checkpoints)
    spec = SampleSpec(
        n_runs=n_runs, n_checkpoints=args.checkpoints, n_cards=10, emb_dim=16, episodes_per_batch=8
    )
    runs, sessions = out / "runs", out / "no_sessions"
    shutil.rmtree(runs, ignore_errors=True)
    generate_corpus(runs, spec)
    n = n_runs * args.checkpoints
    env = _fresh(bench, "runs", runs, sessions)
    label = f"runs ({n_runs} × {args.checkpoints} checkpoints)"
    rows = [_row(f"{label}: `statepool sync`", bench.run("sync", statepool("sync"), env), n)]
    export = statepool("export", "--format", "verl", "--out", str(out / "runs_export"), *ALL_TRAIN)
    rows.append(_row(f"{label}: `statepool export --format verl`", bench.run("x", export, env), n))
    return rows


def side_benches(bench: Bench, args: argparse.Namespace) -> dict:
    append = bench.program(
        "append",
        "sessions_append",
        *("--processes", args.writers, "--state-kb", args.append_kb, "--rate", args.append_rate),
    )
    grow = bench.program("grow", "sessions_grow", "--states-per-segment", args.grow_states)
    return {"append": last_json(append.stdout), "grow": last_json(grow.stdout)}


def markdown(result: dict, command: str) -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "<!-- written by bench/sessions_pool.py; do not edit by hand -->",
        f"Measured {now} on {multiprocessing.cpu_count()} CPUs (Python "
        f"{platform.python_version()}). Every figure is one process, timed from outside; "
        "peak RSS includes its children.",
        "",
        f"```\n{command}\n```",
        "",
        f"| step | states | wall s | states/s | peak RSS MB (target ≤ {TARGET_MB}) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['step']} | {row['states']:,} | {row['seconds']:.2f} | "
            f"{row['states_per_s']:,.0f} | {row['peak_rss_mb']} |"
        )
    append, grow = result.get("append"), result.get("grow")
    if append:
        lines += [
            "",
            f"Append of a {append['state_bytes'] / 1000:.0f} KB state, {append['processes']} "
            f"writer processes at once ({append['appends']} appends, "
            f"{append['rate_per_writer'] or 'flat out'} per writer and second; target p99 ≤ 5 ms): "
            f"p50 {append['p50_ms']} ms, **p99 {append['p99_ms']} ms**, max {append['max_ms']} "
            f"ms; CPU p99 {append['cpu_p99_ms']} ms (load average {append['load_average']} "
            f"on {append['cores']} cores).",
        ]
    if grow:
        lines += [
            "",
            f"A session grown by one segment of {grow['states_per_segment']} states, core "
            f"time: {grow['grown_10_s']} s on 10 segments, {grow['grown_100_s']} s on 100: "
            f"**{grow['ratio']}×** (target ≤ 1.2×).",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write-only", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--read-only", type=str, help=argparse.SUPPRESS)
    parser.add_argument("--states", type=int, default=100_000)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--checkpoints", type=int, default=50, help="per run, on the run path")
    parser.add_argument("--out", type=Path, default=None, help="kept after the bench")
    parser.add_argument("--doc", type=Path, default=None, help="write the Markdown table here")
    parser.add_argument("--no-runs", action="store_true", help="skip the run path")
    parser.add_argument("--no-side", action="store_true", help="skip the append and grow benches")
    parser.add_argument("--append-kb", type=int, default=100)
    parser.add_argument(
        "--append-rate", type=float, default=0.0, help="appends/s per writer (0: flat out)"
    )
    parser.add_argument("--grow-states", type=int, default=200)
    args = parser.parse_args()
    if args.write_only:
        write_session(str(args.write_only), args.writers, args.states)
        return 0
    if args.read_only:
        print(read_session(args.read_only))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        bench = Bench(out)
        result: dict = {"rows": sessions_path(bench, out, args)}
        if not args.no_runs:
            result["rows"] += runs_path(bench, out, args)
        if not args.no_side:
            result.update(side_benches(bench, args))
    command = "python bench/sessions_pool.py " + " ".join(sys.argv[1:])
    if args.doc:
        args.doc.write_text(markdown(result, command.strip()), encoding="utf-8")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
