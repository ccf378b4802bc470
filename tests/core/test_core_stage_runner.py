"""The one stage routine: parts reused by key, written, dropped when no longer made; a
stage's view made of the rows it wrote is the view read back from its table."""

from __future__ import annotations

from pathlib import Path

from statepool_dagster.core.names import SNAPSHOTS, RejectSource
from statepool_dagster.core.rejects import Reject
from statepool_dagster.core.stages import OpenTables
from statepool_dagster.core.stages.runner import VIEWS, Stage, StagePass, preview
from statepool_dagster.core.store.layout import StoreLayout, read_rejects
from statepool_dagster.core.store.part_files import part_name
from statepool_dagster.core.store.rows import SnapshotRow

RUN = "run000"
STAGE = Stage(
    SNAPSHOTS, RejectSource.SNAPSHOTS, preview(["version", "file", "declared_version", "n_cards"])
)


def row(version: int, file: str) -> SnapshotRow:
    return SnapshotRow(version, file, None if version % 2 else version, version, "{}", "")


def build(store: Path, versions: list[int], file: str = "skills.json") -> StagePass:
    """One pass writing ``versions`` (reusing the ones stored under the same key)."""
    stage = StagePass(STAGE, RUN, OpenTables(StoreLayout(store)))
    for version in versions:
        name, key = part_name(version), f"{file}:{version}"
        if not stage.reuse(name, key):
            stage.write_row(name, row(version, f"{file} | {version}\n" + "é" * 250), key, {})
    stage.finish("fingerprint")
    return stage


def test_a_part_stored_under_its_key_is_reused(tmp_path):
    build(tmp_path, [1, 2, 3])
    again = build(tmp_path, [1, 2, 3, 4])
    assert (again.reused, len(again.written)) == (3, 1)
    assert again.report({}).reused == 3


def test_a_part_no_longer_made_is_dropped(tmp_path):
    build(tmp_path, [1, 2, 3])
    again = build(tmp_path, [2])
    assert sorted(again.table.parts) == [part_name(2)]


def test_the_view_of_rows_written_is_the_view_read_back(tmp_path):
    written = build(tmp_path, list(range(1, 15)), "new.json")
    table = written.table
    table.marks.pop(VIEWS)  # nothing cached: read back from the parts
    assert STAGE.view.of(table) == written.shown
    assert "… (+" in written.shown  # long text cells are cut alike


def test_rejects_are_set_aside_by_the_stage_source(tmp_path):
    stage = StagePass(STAGE, RUN, OpenTables(StoreLayout(tmp_path)))
    stage.rejects.append(Reject(file=f"{RUN}/snapshots/x.json", line=None, error="bad", raw=None))
    stage.finish("fingerprint")
    assert [r.error for r in read_rejects(StoreLayout(tmp_path), RUN, "snapshots")] == ["bad"]
    report = stage.report({})
    assert report.markdown["reject_details"].startswith("- ")
