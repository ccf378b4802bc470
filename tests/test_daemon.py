"""End to end with the real daemon: a run folder dropped in is materialized by the sensor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from helpers import REPO, cli_env

SPEC = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
BIN = Path(sys.executable).parent


def wait_for(condition, timeout: float, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        assert proc.poll() is None, "the daemon exited"
        time.sleep(1)
    return False


def test_daemon_sensor_materializes_a_dropped_in_run(workspace, tmp_path):
    env = cli_env(workspace, tmp_path / "home")
    env.update(STATEPOOL_SENSOR_INTERVAL="2", STATEPOOL_SETTLE_SECONDS="1")
    with open(tmp_path / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        generate_runs(workspace.runs, SPEC)
        pool = workspace.store / "state_pool" / "run000"
        expected = {f"run000_ckpt{k}.json" for k in range(SPEC.n_checkpoints)}

        def done() -> bool:
            prompts = workspace.store / "curator_prompts" / "run000"
            if not (prompts.is_dir() and pool.is_dir()):
                return False
            return {p.name for p in pool.iterdir()} == expected

        ok = wait_for(done, 150, proc)
        assert ok, (tmp_path / "daemon.log").read_text(errors="replace")[-4000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
