"""``python -m tools.long_round OUTDIR``: the cases, run and printed one row a step."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec

from .builders import gigabyte_episodes, huge_batch, many_runs, odd_versions, sample
from .growth import edits, growth
from .runner import SEED, Row, one_shot

# --- main ------------------------------------------------------------------------------------


def cases(quick: bool) -> dict[str, Callable[[Path], list[Row]]]:
    q = quick
    small = dict(n_cards=20, emb_dim=8, episodes_per_batch=8)
    spec_2k = SampleSpec(n_checkpoints=200 if q else 2000, **small)
    spec_5k = SampleSpec(n_checkpoints=500 if q else 5000, **small)
    spec_10k = SampleSpec(n_checkpoints=1000 if q else 10000, **small)
    spec_big = SampleSpec(
        n_checkpoints=150 if q else 1500, n_cards=150, emb_dim=64, episodes_per_batch=32
    )
    spec_480 = SampleSpec(n_checkpoints=480, n_cards=150, emb_dim=64, episodes_per_batch=32)
    return {
        "ckpt2000_small": lambda w: one_shot(
            f"{spec_2k.n_checkpoints} ckpts, 20 cards 8-d", w, sample(spec_2k)
        ),
        "ckpt5000_small": lambda w: one_shot(
            f"{spec_5k.n_checkpoints} ckpts, 20 cards 8-d", w, sample(spec_5k)
        ),
        "ckpt10000_small": lambda w: one_shot(
            f"{spec_10k.n_checkpoints} ckpts, 20 cards 8-d", w, sample(spec_10k)
        ),
        "ckpt480_big": lambda w: one_shot(
            "480 ckpts x 150 cards x 64-d (the bench's long)", w, sample(spec_480)
        ),
        "ckpt1500_big": lambda w: one_shot(
            f"{spec_big.n_checkpoints} ckpts x 150 cards x 64-d", w, sample(spec_big)
        ),
        "odd_versions": lambda w: one_shot("odd versions (9 runs)", w, odd_versions),
        "huge_batch": lambda w: one_shot(
            f"one batch of {10_000 if q else 100_000} episodes",
            w,
            huge_batch(10_000 if q else 100_000),
        ),
        "gigabyte_episodes": lambda w: one_shot(
            f"episodes.jsonl {100 if q else 1000} MB over {40 if q else 400} versions",
            w,
            gigabyte_episodes(100 if q else 1000, 40 if q else 400),
        ),
        "growth": lambda w: growth("growth", w, 100 if q else 300, 10 if q else 50),
        "edits": lambda w: edits("edits", w, 40 if q else 400),
        "many_runs": lambda w: one_shot(
            f"{50 if q else 500} small runs", w, many_runs(50 if q else 500)
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--quick", action="store_true", help="each case at a tenth of its size")
    parser.add_argument(
        "--only", nargs="*", default=[], help="cases whose name contains one of these"
    )
    args = parser.parse_args()
    if not SEED.is_file():
        raise SystemExit(f"the original script is not at {SEED} (set STATEPOOL_SEED)")
    rows: list[Row] = []
    for key, case in cases(args.quick).items():
        if args.only and not any(part in key for part in args.only):
            continue
        work = args.outdir / key
        try:
            new = case(work)
        except Exception as exc:  # the harness itself: report and go on
            new = [Row(key, "crash", notes=[f"harness: {type(exc).__name__}: {exc}"])]
        for row in new:
            print_row(row)
        rows += new
        shutil.rmtree(work, ignore_errors=True)
    print("\n| case | result | wall s | peak RSS MB | original wall s | original RSS MB |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.case} | {r.result} | {r.wall:.1f} | {r.rss_mb:.0f} "
            f"| {r.seed_wall:.1f} | {r.seed_rss_mb:.0f} |"
        )
    return min(100, sum(r.result != "match" for r in rows))


def print_row(r: Row) -> None:
    print(
        f"{r.case:<55} {r.result:<6} wall {r.wall:7.1f} s  RSS {r.rss_mb:6.0f} MB"
        f"   (original {r.seed_wall:6.1f} s, {r.seed_rss_mb:6.0f} MB)",
        flush=True,
    )
    for note in r.notes:
        print(f"    {note}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
