"""The session benchmarks run end to end at a tiny size, so they cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO


def _run(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_append_bench_reports_its_figures() -> None:
    result = _run("sessions_append.py", "--processes", "2", "--appends", "20", "--state-kb", "10")
    assert result["appends"] == 40 and result["p99_ms"] > 0 and result["cpu_p99_ms"] > 0
    assert result["segments_sealed"] == 2


def test_the_grow_bench_reports_its_ratio() -> None:
    result = _run("sessions_grow.py", "--states-per-segment", "2", "--repeats", "1")
    assert result["grown_10_s"] > 0 and result["ratio"] > 0
