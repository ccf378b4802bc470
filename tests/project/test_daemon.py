"""End to end with the real daemon: a run folder dropped in is materialized by the sensor."""

from __future__ import annotations

import pytest

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from cli_helpers import cli_env
from process_helpers import daemon, wait_until

pytestmark = pytest.mark.slow  # a daemon

SPEC = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)


def test_daemon_sensor_materializes_a_dropped_in_run(workspace, tmp_path):
    env = cli_env(workspace, tmp_path / "home")
    env.update(STATEPOOL_SENSOR_INTERVAL="2", STATEPOOL_SETTLE_SECONDS="1")
    log = tmp_path / "daemon.log"
    with daemon(env, log) as proc:
        generate_runs(workspace.runs, SPEC)
        pool = workspace.store / "state_pool" / "run000"
        expected = {f"run000_ckpt{k}.json" for k in range(SPEC.n_checkpoints)}

        def done() -> bool:
            prompts = workspace.store / "curator_prompts" / "run000"
            if not (prompts.is_dir() and pool.is_dir()):
                return False
            return {p.name for p in pool.iterdir()} == expected

        wait_until(done, 150, proc, log)
