"""The live-pool bench's serving process: open, read every row, refresh, probe freshness.

    python bench/live_serve.py STORE SESSIONS [--probes 20] [--refreshes 3]
        [--digests FILE] [--read-limit N] [--storage-options JSON] [--first K]

Imports ``statepool_dagster`` from ``PYTHONPATH`` (the checkout measured) and serves its
``LivePool`` as a trainer would; memory is sampled all along (``live_memory``). A
``live_writer.py`` process beside it seals the new segments. The pool before issue 31
(``LivePool(store=...)``, ``.rows``, no sessions folder) is served too: its refresh
follows a rewritten table index (it never sees a sealed segment before a Dagster sync),
and it has no freshness probes. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from live_memory import Sampler, status_mb

try:
    from statepool_dagster.live import LivePool
except ImportError:  # before issue 31: only in the module
    from statepool_dagster.live.pool import LivePool

HERE = Path(__file__).resolve().parent
NEW_API = "sessions" in inspect.signature(LivePool).parameters


class Served:
    """One interface over the pool of issue 31 and the one before it."""

    def __init__(self, store: str, sessions: str, storage_options: dict | None):
        if NEW_API:
            extra = {"storage_options": storage_options} if storage_options else {}
            self.pool = LivePool(store, sessions=sessions, **extra)
        else:
            self.pool = LivePool(store=store)
        self.store = store

    def __len__(self) -> int:
        return len(self.pool) if NEW_API else len(self.pool.rows)

    def row(self, i: int) -> dict:
        if NEW_API:
            return self.pool[i]
        from statepool_dagster.core.export.formats import verl_record

        rows = self.pool.rows
        if getattr(self, "_flags_of", None) is not rows:  # the export's columns: sources, weight
            flags = any(r.session for r in rows), any(r.weight is not None for r in rows)
            self._flags, self._flags_of = flags, rows
        return verl_record(rows[i], *self._flags)

    def state_ids(self) -> list[str]:
        if NEW_API:
            return self.pool.state_ids()
        return [r.state_id for r in self.pool.rows]

    def touch_index(self) -> None:
        """For the old pool, a change: the first table index found, its mtime moved.

        On an object store it has no stamp: every refresh re-reads the pool anyway.
        """
        if "://" in self.store:
            return
        from statepool_dagster.core.names import TABLE_INDEX
        from statepool_dagster.core.sessions.store import INDEX

        path = min(p for p in Path(self.store).rglob("*") if p.name in (TABLE_INDEX, INDEX))
        os.utime(path)


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def row_digests(row: dict) -> dict[str, str]:
    """A digest per field (top level, and each of ``extra_info``'s); None counts as absent."""
    fields = {k: v for k, v in row.items() if k != "extra_info" and v is not None}
    fields |= {f"extra_info.{k}": v for k, v in row["extra_info"].items() if v is not None}
    return {k: _digest(v) for k, v in fields.items()}


def read_all(served: Served, digests: Path | None, limit: int = 0) -> dict:
    """Every row, ``pool[i]`` for each i (its field digests to ``digests``, when given).

    With ``limit``, at most that many rows spread evenly over the pool.
    """
    n = len(served)
    step = -(-n // limit) if limit and limit < n else 1
    indices = range(0, n, step)
    with open(digests or os.devnull, "w", encoding="utf-8") as out:
        started = time.perf_counter()
        for i in indices:
            row = served.row(i)
            if digests:
                out.write(json.dumps([row["extra_info"]["state_id"], row_digests(row)]) + "\n")
        seconds = time.perf_counter() - started
    read = len(indices)
    return {
        "rows": read,
        "read_all_s": round(seconds, 3),
        "read_row_us": round(seconds / read * 1e6, 1),
    }


class Writer:
    """The ``live_writer.py`` process beside the pool."""

    def __init__(self, sessions: str, first: int):
        argv = [sys.executable, str(HERE / "live_writer.py"), sessions]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.next = first

    def send(self, count: int) -> list[str]:
        ids = [f"gen-{k}" for k in range(self.next, self.next + count)]
        self.proc.stdin.write(f"{self.next} {count}\n")
        self.proc.stdin.flush()
        self.next += count
        return ids

    def sealed_at(self) -> float:
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        if self.proc.wait(timeout=60):
            raise SystemExit(f"the writer exited with {self.proc.returncode}")


def refreshes(served: Served, writer: Writer | None, count: int) -> dict:
    """Refresh with nothing new, then after one new 5-state segment (``count`` times)."""
    started = time.perf_counter()
    served.pool.refresh(force=True)
    idle = time.perf_counter() - started
    times, grown = [], []
    for _ in range(count):
        before = len(served)
        if writer:
            writer.send(5)
            writer.sealed_at()
        else:
            served.touch_index()
        started = time.perf_counter()
        served.pool.refresh(force=True)
        times.append(time.perf_counter() - started)
        grown.append(len(served) - before)
    return {
        "refresh_idle_s": round(idle, 4),
        "refresh_new_segment_s": round(statistics.median(times), 4),
        "refresh_new_segment_all_s": [round(t, 4) for t in times],
        "refresh_grew_by": grown,
    }


def probes(served: Served, writer: Writer, count: int, timeout: float = 30.0) -> dict:
    """Sealed → shown: a refresh loop at the default ``refresh_seconds``; ``count`` probes."""
    latencies, matched = [], 0
    rng = random.Random(0)
    for _ in range(count):
        # A random phase against the refresh period, refreshing as a trainer would.
        until = time.monotonic() + rng.uniform(0.0, 1.0)
        while time.monotonic() < until:
            served.pool.refresh()
            time.sleep(0.005)
        before = len(served)
        (sid,) = writer.send(1)
        deadline = time.monotonic() + timeout
        while len(served) <= before and time.monotonic() < deadline:
            served.pool.refresh()
            if len(served) > before:
                break
            time.sleep(0.005)
        seen = time.time()
        sealed = writer.sealed_at()
        if len(served) <= before:
            latencies.append(None)
            continue
        # Session state ids are digests: find the state by its question, new rows come last.
        marker = json.dumps(f"q{sid.removeprefix('gen-')}")
        matched += any(
            marker in served.row(j)["extra_info"]["state"] for j in range(before, len(served))
        )
        latencies.append(seen - sealed)
    done = sorted(t for t in latencies if t is not None)

    def pct(q: float) -> float | None:
        return round(done[min(len(done) - 1, int(q * len(done)))], 3) if done else None

    return {
        "probes": count,
        "probes_seen": len(done),
        "probes_id_matched": matched,
        "fresh_p50_s": pct(0.5),
        "fresh_p99_s": pct(0.99),
        "fresh_max_s": done[-1] if done else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("sessions")
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--refreshes", type=int, default=3)
    parser.add_argument("--digests", type=Path, default=None)
    parser.add_argument("--read-limit", type=int, default=0, help="rows read at most (0: all)")
    parser.add_argument("--storage-options", type=json.loads, default=None)
    parser.add_argument("--first", type=int, default=10**9, help="the probes' first state number")
    args = parser.parse_args()
    result: dict = {"api": "LivePool(store, sessions=...)" if NEW_API else "LivePool(store=...)"}
    writer = Writer(args.sessions, args.first) if NEW_API else None
    with Sampler() as sampler:
        sampler.begin("open")
        started = time.perf_counter()
        served = Served(args.store, args.sessions, args.storage_options)
        served.pool.refresh(force=True)
        result["open_s"] = round(time.perf_counter() - started, 3)
        result["states"] = len(served)
        result["rss_anon_open_mb"] = round(sampler.sample(), 1)
        result["vm_hwm_open_mb"] = round(status_mb()["VmHWM"], 1)
        sampler.begin("read every row")
        result |= read_all(served, args.digests, args.read_limit)
        sampler.begin("refresh")
        result |= refreshes(served, writer, args.refreshes)
        result["vm_hwm_refresh_mb"] = round(status_mb()["VmHWM"], 1)
        if writer and args.probes:
            sampler.begin("freshness probes")
            result |= probes(served, writer, args.probes)
    if writer:
        writer.close()
    result |= sampler.report()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
