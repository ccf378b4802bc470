"""Folding feedback into ``state_stats``: 1,000,000 records, then one more segment.

python bench/feedback_fold.py [--records 1000000] [--states 10000] [--group 8]

Records are generated in segments of 50,000 (groups of ``--group`` answers, a third of
them zero-variance); each fold runs in a fresh process, which reports its wall time
and peak RSS. The second fold adds one segment to the first's store. Groups close at
once (their answers are old); ``--keep-open`` keeps every group open, the worst case
(a verl dump imported whole: its answers all carry the import's time).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from statepool_dagster.core.feedback.records import FeedbackRecord, encode
from statepool_dagster.core.segments import SegmentWriter

SEGMENT = 50_000


def _write(feedback: Path, writer: str, start: int, count: int, states: int, group: int) -> None:
    rng = random.Random(start)
    with SegmentWriter(feedback, writer, max_records=SEGMENT, fsync=False) as out:
        for g in range(start // group, (start + count) // group):
            sid = f"run{g % states // 100:04d}_ckpt{g % 100}"
            flat = g % 3 == 0
            for _ in range(group):
                score = 0.0 if flat else rng.random()
                out.append(
                    encode(
                        FeedbackRecord(
                            sid,
                            score,
                            f"g{g}",
                            1.7e9 + g,
                            "trl",
                            g // 64,
                            int(score > 0.9),
                            {"agreement": score, "format": 1.0},
                        )
                    )
                )


def _fold(store: str, feedback: str, keep_open: bool) -> None:
    from statepool_dagster.core.feedback.stats_store import update_stats

    started = time.perf_counter()
    close = float("inf") if keep_open else 0.0
    report = update_stats(store, feedback, close_seconds=close)
    wall = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "segments": report.new_segments,
                "records": report.new_records,
                "states": report.table.num_rows,
                "wall_s": round(wall, 2),
                "peak_rss_mb": round(rss, 1),
            }
        )
    )


def _run_fold(store: Path, feedback: Path, keep_open: bool) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--fold", str(store), str(feedback)]
        + (["--keep-open"] if keep_open else []),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--states", type=int, default=10_000)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--fold", nargs=2, metavar=("STORE", "FEEDBACK"))
    parser.add_argument(
        "--keep-open", action="store_true", help="every group stays open (the worst case)"
    )
    args = parser.parse_args()
    if args.fold:
        _fold(*args.fold, args.keep_open)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        store, feedback = Path(tmp) / "store", Path(tmp) / "feedback"
        _write(feedback, "bench", 0, args.records, args.states, args.group)
        first = _run_fold(store, feedback, args.keep_open)
        _write(feedback, "late", args.records, SEGMENT, args.states, args.group)
        second = _run_fold(store, feedback, args.keep_open)
    per_segment = first["wall_s"] / max(first["segments"], 1)
    print(
        json.dumps(
            {
                "first_fold": first,
                "one_more_segment": second,
                "first_fold_s_per_segment": round(per_segment, 3),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
