"""The session benchmarks run end to end at a tiny size, so they cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from process_helpers import REPO


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


@pytest.mark.slow
def test_the_pool_bench_writes_syncs_and_compares_with_runs(tmp_path) -> None:
    doc = tmp_path / "sessions.md"
    result = _run(
        "sessions_pool.py", "--states", "40", "--writers", "2", "--checkpoints", "10",
        "--append-kb", "5", "--grow-states", "2", "--doc", str(doc),
    )  # fmt: skip
    rows = {row["step"].split(":")[0]: row for row in result["rows"]}
    assert rows["write, 2 writer processes"]["states"] == 40
    assert {r["states"] for r in result["rows"]} == {40}
    assert all(r.get("peak_rss_mb", 1) > 0 and r.get("states_per_s", 1) > 0 for r in rows.values())
    assert result["append"]["appends"] == 800 and result["grow"]["ratio"] > 0
    text = doc.read_text(encoding="utf-8")
    assert "| session: `statepool sync` | 40 |" in text and "p99" in text and "ratio" not in text
