"""Append latency of session writers: N processes appending states of a given size at once.

python bench/sessions_append.py [--processes 8] [--appends 400] [--state-kb 100] [--rate R]
                                [--dir DIR]

Each ``StateWriter.append`` is timed in its process (the state passed as a
``CheckpointState``, so its ``to_json`` is part of the cost, as in a rollout worker);
sealing (fsync + exclusive rename) happens inside the append that fills a segment and
is counted there. Prints p50 / p99 / max wall-clock ms, the p99 of the CPU time the
append itself spent (wall minus CPU is time the process waited for a core: on a machine
with fewer cores than writers that dominates), and the states written per second.
``--rate`` paces each writer (appends per second; 0: as fast as it can), as a rollout
worker producing states between model calls would.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.layout import segments_dir
from statepool_dagster.core.states.models import CheckpointState


def make_state(k: int, size: int) -> CheckpointState:
    """A state of about ``size`` bytes of JSON: a small library and a batch of long episodes."""
    per_episode = 2000
    episodes = [
        {
            "skill_lib_version": k,
            "id": f"q{i}",
            "question": "x" * (per_episode - 60),
            "correct": i % 2 == 0,
        }
        for i in range(max(1, size // per_episode))
    ]
    cards = [{"card_id": f"c{i}", "trigger": "when " * 20, "program": "do " * 30} for i in range(8)]
    return CheckpointState(
        state_id=f"bench_ckpt{k}",
        dataset="ovo",
        lib_snapshot={"version": k, "cards": cards},
        episodes=episodes,
        analysis=None,
        last_receipt="(bench)",
    )


def worker(
    root: str, writer: str, appends: int, size: int, rate: float, seal: int, start: float, out
) -> None:
    states = [make_state(k, size) for k in range(8)]
    wall, cpu = [], []
    while time.time() < start:  # every process starts appending at once
        time.sleep(0.001)
    with StateWriter(root, "bench", writer=writer, max_bytes=seal) as w:
        for k in range(appends):
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            w.append(states[k % len(states)], policy_step=k)
            wall.append(time.perf_counter_ns() - t0)
            cpu.append(time.thread_time_ns() - c0)
            if rate:
                time.sleep(max(0.0, (k + 1) / rate - (time.time() - start)))
    out.put((wall, cpu))


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--appends", type=int, default=400)
    parser.add_argument("--state-kb", type=int, default=100)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--segment-mb", type=float, default=64.0, help="seal at this size")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    size = args.state_kb * 1000
    seal = int(args.segment_mb * 1e6)
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        context = multiprocessing.get_context("fork")
        out = context.Queue()
        start = time.time() + 1.0
        procs = [
            context.Process(
                target=worker,
                args=(root, f"w{i}", args.appends, size, args.rate, seal, start, out),
            )
            for i in range(args.processes)
        ]
        for p in procs:
            p.start()
        latencies, cpu = [], []
        for _ in procs:
            wall_ns, cpu_ns = out.get(timeout=600)  # a worker that died fails the bench
            latencies += wall_ns
            cpu += cpu_ns
        for p in procs:
            p.join()
        elapsed = time.time() - start
        segments = list_segments(segments_dir(root, "bench"))
        state_bytes = len(make_state(0, size).to_json().encode())
    result = {
        "processes": args.processes,
        "appends": len(latencies),
        "state_bytes": state_bytes,
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "max_ms": round(max(latencies) / 1e6, 3),
        "cpu_p99_ms": round(percentile(cpu, 0.99), 3),
        "rate_per_writer": args.rate,
        "segment_mb": args.segment_mb,
        "load_average": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
        "states_per_s": round(len(latencies) / elapsed, 1),
        "segments_sealed": len(segments),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
