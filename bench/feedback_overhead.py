"""Cost of recording feedback in ``compute_score``: the same calls with recording off and on.

python bench/feedback_overhead.py [--calls 2000] [--rounds 7]

Sample runs are built into a temporary store by the core (no Dagster); each call grades
one answer (the reference ops, or a wrong one) for one state. The same blocks of 100
calls run off then on (or on then off, alternating), so a neighbour's load hits both
alike, and time is the process's CPU time (a loaded machine's waits are not counted);
the figures are the median per-call time of each, the median of the blocks'
on/off ratios, and the recording alone timed on the same calls' results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.core.export.collect import collect_export
from statepool_dagster.core.export.rows import ExportOptions
from statepool_dagster.core.feedback.grading import record_one
from statepool_dagster.core.feedback.recorder import FEEDBACK_ENV, flush_all
from statepool_dagster.core.runs.files import discover_runs
from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs
from statepool_dagster.rewards import compute_score


def _calls(store: Path, n: int) -> list[tuple[str, str, dict]]:
    rows = collect_export(store, ExportOptions(val_fraction=0.0)).rows
    calls = []
    for i in range(n):
        row = rows[i % len(rows)]
        truth = row.ground_truth()
        answer = f"```json\n{truth}\n```" if i % 2 else '[{"op": "delete_card", "card_id": "x"}]'
        extra = {"state": row.state, "reference_ops": row.reference_ops, "state_id": row.state_id}
        calls.append((answer, truth, extra))
    return calls


def _round(calls: list[tuple[str, str, dict]]) -> float:
    started = time.process_time()
    for answer, truth, extra in calls:
        compute_score("statepool", answer, truth, extra)
    return (time.process_time() - started) / len(calls)


def _record_only(calls: list[tuple[str, str, dict]]) -> float:
    """The recording alone, per call, on the breakdowns the grader gave for these calls."""
    results = [compute_score("statepool", a, t, e) for a, t, e in calls]
    started = time.process_time()
    for result in results:
        record_one(result["state_id"], result)
    return (time.process_time() - started) / len(results)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate_runs(root / "runs", SampleSpec(n_runs=2, n_checkpoints=6))
        settings = Settings(runs_dir=str(root / "runs"), store_dir=str(root / "store"))
        for name in discover_runs(root / "runs").names:
            build_run(settings, name)
        calls = _calls(root / "store", args.calls)
        feedback = root / "feedback"
        os.environ.pop(FEEDBACK_ENV, None)
        _round(calls)  # warm the grader and the state cache
        off, on, ratios = [], [], []
        block = max(1, min(100, len(calls)))
        for i in range(args.rounds * max(1, len(calls) // block)):
            start = (i * block) % len(calls)
            part = calls[start : start + block]
            pair = {}
            for recording in (i % 2 == 0, i % 2 == 1):  # which goes first alternates
                if recording:
                    os.environ[FEEDBACK_ENV] = str(feedback)
                else:
                    os.environ.pop(FEEDBACK_ENV, None)
                pair[recording] = _round(part)
            off.append(pair[False])
            on.append(pair[True])
            ratios.append(pair[True] / pair[False])
        os.environ[FEEDBACK_ENV] = str(feedback)
        record_only = _record_only(calls)
        flush_all()
        recorded = sum(s.size for s in list_segments(feedback))
    off_s, on_s = statistics.median(off), statistics.median(on)
    print(
        json.dumps(
            {
                "calls_per_round": args.calls,
                "rounds": args.rounds,
                "off_us_per_call": round(off_s * 1e6, 2),
                "on_us_per_call": round(on_s * 1e6, 2),
                "overhead_pct": round(100 * (on_s - off_s) / off_s, 2),
                "paired_overhead_pct": round(100 * (statistics.median(ratios) - 1), 2),
                "record_only_us_per_call": round(record_only * 1e6, 2),
                "record_only_pct_of_call": round(100 * record_only / off_s, 2),
                "recorded_bytes": recorded,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
