"""The report's kept figures (``core/report/cache.py``): a report counts each run it has
not counted, the next draws from them, and the pages are the same bytes as when every run is
read again."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from statepool_dagster.cli.sync import sync
from statepool_dagster.core.report import write_report
from statepool_dagster.core.report.cache import FIGURES_FOLDER
from statepool_dagster.core.report.paths import RUN_PAGE_KEYS
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
WRITTEN = re.compile(rb"written [0-9T:+-]+")


def pages(report: Path) -> dict[str, bytes]:
    """Every page of the report, the overview's time of writing left out."""
    return {
        str(p.relative_to(report)): WRITTEN.sub(b"written", p.read_bytes())
        for p in sorted(report.rglob("*.html"))
    }


def report_from_scratch(store: Path, runs: Path) -> dict[str, bytes]:
    """The report when no figures and no run page are kept: every run read and drawn again."""
    shutil.rmtree(store / "report" / FIGURES_FOLDER, ignore_errors=True)
    (store / "report" / "runs" / RUN_PAGE_KEYS).unlink(missing_ok=True)
    write_report(store, runs_dir=runs, collect=False)
    return pages(store / "report")


def test_kept_figures_draw_the_same_report_and_follow_changes(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    snapshots = workspace.run("run001") / "snapshots"
    shutil.copy(snapshots / "skills_v1.json", snapshots / "skills_v1.bak")  # an ignored file
    figures = workspace.store / "report" / FIGURES_FOLDER
    assert not sync(instance).failed
    assert not figures.exists()  # a sync counts nothing: the report does, where it is built
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    assert sorted(p.name for p in figures.iterdir()) == [f"run00{i}.json" for i in range(3)]
    kept = {p.name: p.stat().st_mtime_ns for p in figures.iterdir()}
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    assert {p.name: p.stat().st_mtime_ns for p in figures.iterdir()} == kept  # none read
    drawn = pages(workspace.store / "report")
    assert drawn == report_from_scratch(workspace.store, workspace.runs)
    assert "run001.html" in str(list(drawn)) and b"skills_v1.bak" in drawn["runs/run001.html"]

    # A run changed (a line its episodes cannot use): its figures are read again.
    with open(workspace.run("run000") / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")
    before = (figures / "run001.json").stat().st_mtime_ns
    assert not sync(instance).failed
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    assert (figures / "run001.json").stat().st_mtime_ns == before  # unchanged: kept
    changed = pages(workspace.store / "report")
    assert changed != drawn
    assert changed == report_from_scratch(workspace.store, workspace.runs)


def test_broken_or_stale_figures_are_read_again(workspace, instance):
    generate_runs(workspace.runs, SPEC)
    assert not sync(instance).failed
    expected = report_from_scratch(workspace.store, workspace.runs)
    figures = workspace.store / "report" / FIGURES_FOLDER
    (figures / "run000.json").write_text("{not json")
    stale = (figures / "run001.json").read_text().replace('"states": 3', '"states": 99')
    (figures / "run001.json").write_text(stale.replace('"stamp": "', '"stamp": "x'))
    (figures / "gone.json").write_text("{}")  # a run no longer in the store
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    assert pages(workspace.store / "report") == expected
    assert sorted(p.name for p in figures.iterdir()) == [
        "run000.json",
        "run001.json",
        "run002.json",
    ]


def test_a_store_elsewhere_keeps_no_figures(tmp_path):
    layout = StoreLayout("memory://statepool-report-cache/store")
    from statepool_dagster.core.report.cache import files_stamp

    assert files_stamp(layout, "run000") is None


def test_a_run_page_drawn_from_the_same_figures_is_kept_and_redrawn_on_any_change(
    workspace, instance
):
    generate_runs(workspace.runs, SPEC)
    assert not sync(instance).failed
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    runs = workspace.store / "report" / "runs"
    first = {p.name: p.stat().st_ino for p in runs.glob("*.html")}
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    assert {p.name: p.stat().st_ino for p in runs.glob("*.html")} == first  # kept, not drawn

    # A file the run folder holds but the store does not (an ignored file): drawn again.
    snapshots = workspace.run("run001") / "snapshots"
    shutil.copy(snapshots / "skills_v1.json", snapshots / "skills_v1.bak")
    # A page the last report drew, removed by hand: drawn again too.
    (runs / "run002.html").unlink()
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    now = {p.name: p.stat().st_ino for p in runs.glob("*.html")}
    assert now["run000.html"] == first["run000.html"]
    assert now["run001.html"] != first["run001.html"]
    assert b"skills_v1.bak" in (runs / "run001.html").read_bytes()
    kept = pages(workspace.store / "report")
    assert kept == report_from_scratch(workspace.store, workspace.runs)

    # A broken key file: every page drawn again, the same bytes.
    (runs / RUN_PAGE_KEYS).write_text("[not a mapping")
    write_report(workspace.store, runs_dir=workspace.runs, collect=False)
    assert pages(workspace.store / "report") == kept
