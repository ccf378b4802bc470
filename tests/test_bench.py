"""The benchmark script runs end to end at a tiny size, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow  # the benchmark: many processes


def test_benchmark_runs_at_tiny_size_and_reports_every_figure(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "run_bench.py"),
            "--size",
            "tiny",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "tiny" / "results.json").read_text())
    names = {m["name"] for m in results["measures"]}
    assert {"core alone (no Dagster)", "statepool sync (fresh)", "sync: run grew 1 ckpt"} <= names
    assert all(m["seconds"] > 0 and m["peak_rss_mb"] > 0 for m in results["measures"])
    assert results["sensor"]["unchanged_requests"] == 0
    assert results["sensor"]["new_requests"] == results["sensor"]["new"]
    assert "| statepool sync (fresh) |" in done.stdout
    assert results["core_grow"]["full_s"] > 0 and results["core_grow"]["grown_s"] > 0
    assert results["rss_half_runs_mb"] > 0 and results["noop_step_s"] > 0
    assert "the same for the core alone" in done.stdout
    assert results["dagster_floor"]["seconds"] > 0 and results["dagster_floor_step_s"] > 0
    assert results["long_short"]["dagster_one_partition_step_s"] > 0
    assert "Dagster alone: import, fresh instance" in done.stdout
    assert results["sync_floor"]["seconds"] > 0
    long_short = results["long_short"]
    for label in ("long", "short"):
        figures = long_short[label]
        assert figures["scratch_rss_mb"] > 0 and figures["scratch_step_s"] > 0
        assert figures["idle_s"] > 0 and figures["grown_s"] > 0
    assert long_short["long"]["checkpoints"] > long_short["short"]["checkpoints"]
    assert "| long |" in done.stdout and "| short |" in done.stdout
    # Each speed target beside its floor, all from this run (they are ratios to the original).
    if not (REPO.parent / "shared" / "reference" / "statepool_seed.py").is_file():
        pytest.skip("original script not found: no targets to set floors beside")
    floors = {row["target"]: row for row in results["floors"]}
    assert len(floors) == 4 and results["core_imports"]["seconds"] > 0
    core = floors["core alone ≥ 15× the original"]
    assert core["floor_s"] == results["core_imports"]["seconds"]
    assert core["allowed_s"] == pytest.approx(
        next(m for m in results["measures"] if m["name"] == "original script")["seconds"] / 15
    )
    assert all(row["floor_s"] > 0 and row["measured_s"] > 0 for row in floors.values())
    assert "| target | allowed s | measured s | floor s |" in done.stdout
