"""Benchmark: statepool against the core alone and the original script, on one generated corpus.

    python bench/run_bench.py                  # reference: 10 runs x 60 ckpt x 150 cards x 768-d
    python bench/run_bench.py --size tiny      # seconds; what CI runs so the bench cannot rot
    python bench/run_bench.py --size wide      # 200 small runs, 3,800 states (a few minutes)
    python bench/run_bench.py --size huge      # ~100,000 states; opt-in, never in CI
    python bench/run_bench.py --size long      # one 480- and one 60-checkpoint run
    python bench/run_bench.py --size wide --code ../other-checkout --postgres postgresql://...

Writes the table as Markdown to docs/performance/<size>.md (the docs include it) and every
figure to bench/out/<size>/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from measure import REPO, Bench
from shapes import DETAILED, LONG_ONLY, SIZES, expected_states, generate_corpus, spec_of


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def run_info(bench: Bench, argv: list[str]) -> dict[str, object]:
    """What was measured, when, where and how: the header of the docs page."""
    argv = [a if not a.startswith("postgresql://") else "URL" for a in argv]
    return {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "dagster": version("dagster"),
        "code": str(bench.code),
        "code_commit": git(bench.code, "rev-parse", "--short", "HEAD") or "unknown",
        "code_dirty": bool(git(bench.code, "status", "--porcelain", "--untracked-files=no")),
        "bench_commit": git(REPO, "rev-parse", "--short", "HEAD") or "unknown",
        "command": shlex.join(["python", "bench/run_bench.py", *argv]),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=SIZES, default="reference")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each repeatable measure (median)"
    )
    parser.add_argument(
        "--code",
        type=Path,
        default=REPO,
        help="checkout whose statepool_dagster every measured command runs (PYTHONPATH)",
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=None,
        help="also run the sync measures on PostgreSQL storage (a new database each time)",
    )
    parser.add_argument(
        "--doc-file",
        type=Path,
        default=None,
        help="Markdown table to write (default docs/performance/<size>.md)",
    )
    parser.add_argument(
        "--only-generate", action="store_true", help="generate the corpus, measure nothing"
    )
    return parser.parse_args(argv)


def measure_corpus(bench: Bench, args: argparse.Namespace, results: dict) -> list[str] | None:
    """Generate the corpus, run the measures its size calls for; the Markdown parts."""
    from detail_suite import run_detail_suite
    from pool_suite import ORIGINAL, run_pool_suite
    from render import render_pool, render_targets
    from render_detail import floors, render_detail, render_floors, render_long

    spec = spec_of(args.size)
    shutil.rmtree(bench.out, ignore_errors=True)
    runs = bench.out / "runs"
    runs.mkdir(parents=True)
    mb = generate_corpus(runs, spec)
    results.update(spec=asdict(spec), input_mb=mb, expected_states=expected_states(spec))
    if args.only_generate:
        return None
    pool, env = run_pool_suite(bench, args.size, spec, runs, args.repeat)
    results.update(pool)
    parts = [render_pool(results), render_targets(results)]
    if args.size in DETAILED:
        results.update(run_detail_suite(bench, args.size, spec, env, args.repeat))
        parts += [render_detail(results), render_long(results["long_short"])]
        if any(m["name"] == ORIGINAL for m in results["measures"]):
            results["floors"] = floors(results)
            parts.append(render_floors(results))
    return parts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    bench = Bench(
        out=(args.out / args.size).resolve(), code=args.code.resolve(), postgres=args.postgres
    )
    results: dict[str, object] = {"size": args.size, "run": run_info(bench, argv)}
    try:
        if args.size in LONG_ONLY:
            from long_runs import long_and_short
            from render_detail import render_long

            bench.out.mkdir(parents=True, exist_ok=True)
            results["long_short"] = long_and_short(bench, args.size, args.repeat)
            parts: list[str] | None = [render_long(results["long_short"])]
        else:
            parts = measure_corpus(bench, args, results)
    finally:
        bench.drop_databases()
    (bench.out / "results.json").write_text(json.dumps(results, indent=1))
    if parts is None:
        print(json.dumps({k: results[k] for k in ("spec", "input_mb", "expected_states")}))
        return 0
    from render import render_header

    page = "\n\n".join([render_header(results), *(p for p in parts if p)]) + "\n"
    doc = args.doc_file or REPO / "docs" / "performance" / f"{args.size}.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(page)
    print(page, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
