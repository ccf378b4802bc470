"""``statepool status`` from the instance's index: each partition's latest materialization
and failed runs, read back from a real instance."""

from __future__ import annotations

from dagster import AssetKey

from statepool_dagster.cli.status import run_statuses
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import JOB, PROMPTS, RUN_STATES, SNAPSHOTS
from statepool_dagster.definitions import defs
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)


def test_status_tells_materialized_stale_failed_and_never(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert not sync(instance).failed
    settings = Settings.from_env()
    append_checkpoint(workspace.run("run001"), SPEC, 1)
    failed = instance.create_run_for_job(
        defs().resolve_job_def(JOB), tags={"dagster/partition": "run002"}
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


def _materialize(instance, asset: str, run: str) -> None:
    """One asset of one run through Dagster, as the UI's "Materialize selected" does."""
    job = defs().resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance, asset_selection=[AssetKey(asset)], partition_key=run
    )
    assert result.success


def test_status_totals_come_from_the_final_asset_unless_it_is_behind(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    (workspace.run("run000") / "snapshots" / "skills_v1.bak").write_text("{}")
    assert not sync(instance).failed
    record = instance.fetch_materializations(AssetKey(PROMPTS), limit=10).records[0]
    assert record.asset_materialization.metadata[RUN_STATES].value == 3
    settings = Settings.from_env()
    totals = {r["run"]: (r["states"], r["ignored_files"]) for r in run_statuses(instance, settings)}
    assert totals == {"run000": (3, 1), "run001": (3, 0), "run002": (3, 0)}
    # The prompts alone (no totals on them) and snapshots alone (newer than the prompts,
    # with a new ignored file): each run's totals still from its latest materializations.
    _materialize(instance, PROMPTS, "run001")
    latest = instance.get_latest_materialization_event(AssetKey(PROMPTS))
    assert RUN_STATES not in latest.asset_materialization.metadata
    (workspace.run("run002") / "snapshots" / "skills_v2.bak").write_text("{}")
    _materialize(instance, SNAPSHOTS, "run002")
    rows = {r["run"]: r for r in run_statuses(instance, settings)}
    assert {run: (r["states"], r["ignored_files"]) for run, r in rows.items()} == {
        "run000": (3, 1),
        "run001": (3, 0),
        "run002": (3, 1),
    }
    assert [rows[r]["status"] for r in ("run000", "run001", "run002")] == [
        "materialized",
        "materialized",
        "stale",
    ]
