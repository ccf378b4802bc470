"""The store's per-run lock serialises writers across processes and is re-entrant within one."""

from __future__ import annotations

import gc
import subprocess
import sys
import time

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.stages import RunJob, StageReport, run_stage
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


def _gc_state(job: RunJob) -> StageReport:
    return StageReport(job.run, "", 0, values={"gc_enabled": int(gc.isenabled())})


def _failing(job: RunJob) -> StageReport:
    raise RuntimeError("stage failed")


def test_stages_run_with_the_cycle_collector_paused_and_restore_it(tmp_path):
    job = RunJob(Settings(runs_dir=str(tmp_path), store_dir=str(tmp_path / "store")), "run000")
    assert gc.isenabled()
    (report,) = run_stage(_gc_state, [job], workers=1)
    assert report.values["gc_enabled"] == 0
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="stage failed"):
        run_stage(_failing, [job], workers=1)
    assert gc.isenabled()
