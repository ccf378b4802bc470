"""Benchmark: statepool against the core alone and the original script, on one generated corpus.

    python bench/run_bench.py                  # reference: 10 runs x 60 ckpt x 150 cards x 768-d
    python bench/run_bench.py --size tiny      # seconds; what CI runs so the bench cannot rot
    python bench/run_bench.py --size wide      # 200 small runs, 3,800 states (a few minutes)
    python bench/run_bench.py --size huge      # ~100,000 states; opt-in, never in CI
    python bench/run_bench.py --size long      # one 480- and one 60-checkpoint run
    python bench/run_bench.py --size wide --code ../other-checkout --postgres postgresql://...

Writes the table as Markdown to docs/performance/<size>.md (the docs include it), every
figure beside it (docs/performance/<size>.json) and to bench/out/<size>/results.json.
The huge page compares each whole-pool command's time per state with wide.json's.

    python bench/run_bench.py --render docs/performance/huge.json   # the page again, no measuring
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from measure import REPO, TRASH, Bench, empty_trash
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
        # docs/ left out: the pages a bench run just wrote are no change to the code measured.
        "code_dirty": bool(
            git(bench.code, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs")
        ),
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
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        default=None,
        help="write the page again from a results file, measuring nothing",
    )
    parser.add_argument(
        "--only-generate", action="store_true", help="generate the corpus, measure nothing"
    )
    return parser.parse_args(argv)


def measure_corpus(bench: Bench, args: argparse.Namespace, results: dict) -> bool:
    """Generate the corpus and run the measures its size calls for; False if only generated."""
    from detail_suite import run_detail_suite
    from pool_suite import ORIGINAL, run_pool_suite
    from render_detail import floors

    spec = spec_of(args.size)
    empty_trash(bench.out)  # the sitting before's outputs, deleted before anything is timed
    if bench.out.is_dir():
        for path in bench.out.iterdir():
            if path.name != TRASH:
                bench.discard(path)
    runs = bench.out / "runs"
    runs.mkdir(parents=True)
    mb = generate_corpus(runs, spec)
    results.update(spec=asdict(spec), input_mb=mb, expected_states=expected_states(spec))
    if args.only_generate:
        return False
    pool, env = run_pool_suite(bench, args.size, spec, runs, args.repeat)
    results.update(pool)
    if args.size in DETAILED:
        results.update(run_detail_suite(bench, args.size, spec, env, args.repeat))
        if any(m["name"] == ORIGINAL for m in results["measures"]):
            results["floors"] = floors(results)
    return True


def render_page(results: dict, doc: Path) -> str:
    """The docs page of one results file; huge's compares with the wide.json beside ``doc``."""
    from render import render_header, render_per_state, render_pool, render_targets
    from render_detail import render_detail, render_floors, render_long

    if results["size"] in LONG_ONLY:
        parts = [render_long(results["long_short"])]
    else:
        parts = [render_pool(results), render_targets(results)]
        if results["size"] == "huge":
            wide = doc.parent / "wide.json"
            if wide.is_file():
                parts.append(render_per_state(results, json.loads(wide.read_text()), wide.name))
        if "incremental" in results:
            parts += [render_detail(results), render_long(results["long_short"])]
            if "floors" in results:
                parts.append(render_floors(results))
    return "\n\n".join([render_header(results), *(p for p in parts if p)]) + "\n"


def write_page(results: dict, doc: Path) -> None:
    doc.parent.mkdir(parents=True, exist_ok=True)
    page = render_page(results, doc)
    doc.write_text(page)
    doc.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print(page, end="")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render is not None:
        results = json.loads(args.render.read_text())
        write_page(results, args.doc_file or args.render.with_suffix(".md"))
        return 0
    bench = Bench(
        out=(args.out / args.size).resolve(), code=args.code.resolve(), postgres=args.postgres
    )
    results: dict[str, object] = {"size": args.size, "run": run_info(bench, argv)}
    try:
        if args.size in LONG_ONLY:
            from long_runs import long_and_short

            bench.out.mkdir(parents=True, exist_ok=True)
            empty_trash(bench.out)
            results["long_short"] = long_and_short(bench, args.size, args.repeat)
            measured = True
        else:
            measured = measure_corpus(bench, args, results)
    finally:
        bench.drop_databases()
    (bench.out / "results.json").write_text(json.dumps(results, indent=1))
    if not measured:
        print(json.dumps({k: results[k] for k in ("spec", "input_mb", "expected_states")}))
        return 0
    write_page(results, args.doc_file or REPO / "docs" / "performance" / f"{args.size}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
