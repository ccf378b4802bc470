"""A session grown by one segment costs one segment's work: 10 segments against 100.

python bench/sessions_grow.py [--states-per-segment 200] [--repeats 5]

For each size, a session of N sealed segments is built, then one segment is added and
the session built again; the figure is the second build's core time (median of the
repeats) and the ratio of the 100-segment figure to the 10-segment one (target ≤ 1.2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session


def _state(k: int) -> dict:
    cards = [{"card_id": f"c{i}", "trigger": "when " * 10, "program": "do " * 10} for i in range(4)]
    return {
        "state_id": f"gen-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": cards},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}"}],
        "analysis": None,
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }


def _segment(root: Path, start: int, count: int) -> None:
    with StateWriter(root, "grow", writer="w", fsync=False) as w:
        for k in range(start, start + count):
            w.append(_state(k), policy_step=k)


def grown_build_seconds(segments: int, per_segment: int) -> float:
    spec = Settings().prompt_spec()
    with tempfile.TemporaryDirectory() as tmp:
        root, store = Path(tmp) / "sessions", Path(tmp) / "store"
        for i in range(segments):
            _segment(root, i * per_segment, per_segment)
        build_session(root, store, "grow", spec)
        _segment(root, segments * per_segment, per_segment)
        started = time.perf_counter()
        built = build_session(root, store, "grow", spec)
        seconds = time.perf_counter() - started
        assert len(built.built) == 1
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states-per-segment", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    figures = {}
    for segments in (10, 100):
        runs = [grown_build_seconds(segments, args.states_per_segment) for _ in range(args.repeats)]
        figures[segments] = statistics.median(runs)
    result = {
        "states_per_segment": args.states_per_segment,
        "grown_10_s": round(figures[10], 4),
        "grown_100_s": round(figures[100], 4),
        "ratio": round(figures[100] / figures[10], 3),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
