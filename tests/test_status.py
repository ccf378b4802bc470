"""``statepool status`` from the instance's index: each partition's latest materialization
and failed runs, read back from a real instance."""

from __future__ import annotations

from statepool_dagster.cli.status import run_statuses
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.config import Settings
from statepool_dagster.definitions import defs
from statepool_dagster.defs.jobs import JOB
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)


def test_status_tells_materialized_stale_failed_and_never(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert not sync(instance).failed
    settings = Settings.from_env()
    append_checkpoint(workspace.run("run001"), SPEC, 1)
    failed = instance.create_run_for_job(
        defs.resolve_job_def(JOB), tags={"dagster/partition": "run002"}
    )
    instance.report_run_failed(failed)
    instance.add_dynamic_partitions("runs", ["run003"])
    rows = {row["run"]: row for row in run_statuses(instance, settings)}
    assert {run: row["status"] for run, row in rows.items()} == {
        "run000": "materialized",
        "run001": "stale",
        "run002": "failed",
        "run003": "never",
    }
    assert [rows[r]["states"] for r in ("run000", "run001", "run002", "run003")] == [3, 3, 3, 0]
    assert rows["run000"]["last_materialized"] and rows["run003"]["last_materialized"] is None
