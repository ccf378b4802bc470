"""The store's per-run lock serialises writers across processes and is re-entrant within one;
the stages' pool streams results in run order and stops when its reader does."""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.stages import OpenTables, StageReport, run_each, stream_each
from statepool_dagster.core.store.layout import StoreLayout

HOLDER = """
import sys, time
from statepool_dagster.core.store.layout import StoreLayout
with StoreLayout(sys.argv[1]).lock("run000"):
    print("held", flush=True)
    time.sleep(1.5)
"""


def test_lock_blocks_a_second_process_until_released(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    with StoreLayout(tmp_path).lock("run000"):
        waited = time.monotonic() - started
    holder.wait(timeout=30)
    assert waited > 0.5


def test_lock_of_another_run_does_not_wait(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    with StoreLayout(tmp_path).lock("run001"):
        waited = time.monotonic() - started
    holder.wait(timeout=30)
    assert waited < 0.5


def test_lock_is_reentrant_within_a_process(tmp_path):
    layout = StoreLayout(tmp_path)
    with layout.lock("run000"), layout.lock("run000"):
        pass
    with layout.lock("run000"):  # released properly: can be taken again
        pass


def _gc_state(run: str, settings: Settings, tables: OpenTables) -> StageReport:
    return StageReport(run, "", 0, values={"gc_enabled": int(gc.isenabled())})


def _failing(run: str, settings: Settings, tables: OpenTables) -> StageReport:
    raise RuntimeError("stage failed")


def test_stages_run_with_the_cycle_collector_paused_and_restore_it(tmp_path):
    settings = Settings(runs_dir=str(tmp_path), store_dir=str(tmp_path / "store"))
    assert gc.isenabled()
    (report,) = run_each(_gc_state, settings, ["run000"], workers=1)
    assert report.values["gc_enabled"] == 0
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="stage failed"):
        run_each(_failing, settings, ["run000"], workers=1)
    assert gc.isenabled()


def _slow_marked(run: str, settings: Settings, tables: OpenTables) -> StageReport:
    (Path(settings.store_dir) / f"{run}.started").touch()
    time.sleep(0.2)
    return StageReport(run, "", 0)


def test_streamed_results_come_in_run_order_and_closing_early_cancels_the_rest(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    settings = Settings(runs_dir=str(tmp_path), store_dir=str(store))
    runs = [f"run{i:03d}" for i in range(12)]
    streamed = [r.run for ready in stream_each(_slow_marked, settings, runs, 2) for r in ready]
    assert streamed == runs
    for marker in store.glob("*.started"):
        marker.unlink()
    stream = stream_each(_slow_marked, settings, runs, 2)
    first = next(stream)
    stream.close()  # a step stopped early: the pool is shut down, no further run started
    assert first[0].run == "run000"
    started = len(list(store.glob("*.started")))
    assert len(first) <= started < len(runs)
