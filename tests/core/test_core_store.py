"""The store's layout refuses escaping run names; its writes are atomic and leave no temps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statepool_dagster.core.runs.json_read import INT64_MAX, INT64_MIN
from statepool_dagster.core.store.atomic import replace_dir_atomic, write_bytes_atomic
from statepool_dagster.core.store.layout import (
    StoreLayout,
    read_rejects,
    update_rejects,
    update_state_pool,
    write_state_file,
)
from statepool_dagster.core.store.part_files import part_name
from statepool_dagster.core.store.rows import ROWS
from statepool_dagster.core.store.schemas import SCHEMAS

ESCAPING = ["..", "../other", "a/b", "/etc", ".", "", "..\\x", "run/../../x", "ok\x00"]


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("run", ESCAPING)
def test_layout_refuses_run_names_that_escape(tmp_path, run):
    layout = StoreLayout(tmp_path / "store")
    for path_of in (
        lambda: layout.table("episodes", run),
        lambda: layout.state_pool(run),
        lambda: layout.rejects(run),
    ):
        with pytest.raises(ValueError):
            path_of()
    with pytest.raises(ValueError), layout.lock(run):
        pass
    assert not (tmp_path / "store").exists() or entries(tmp_path / "store") == []


def test_layout_paths_of_a_valid_run_stay_under_the_root(tmp_path):
    root = tmp_path / "store"
    layout = StoreLayout(root)
    assert layout.table("episodes", "run000") == root / "episodes" / "run000"
    assert layout.state_pool("run000") == root / "state_pool" / "run000"
    assert layout.rejects("run000") == root / "rejects" / "run000.jsonl"


def test_layout_refuses_an_asset_folder_that_leaves_the_root(tmp_path):
    with pytest.raises(ValueError, match="leave the store root"):
        StoreLayout(tmp_path / "store").table("../outside", "run000")


def test_layout_refuses_a_link_out_of_the_root_and_keeps_one_inside(tmp_path):
    root, outside = tmp_path / "store", tmp_path / "outside"
    (root / "inner").mkdir(parents=True)
    outside.mkdir()
    (root / "states").symlink_to(outside, target_is_directory=True)
    (root / "prompts").symlink_to(root / "inner", target_is_directory=True)
    (root / "episodes").mkdir()
    (root / "episodes" / "run000").symlink_to(outside, target_is_directory=True)
    layout = StoreLayout(root)
    for asset in ("states", "episodes"):
        with pytest.raises(ValueError, match="leave the store root"):
            layout.table(asset, "run000")
    assert layout.table("prompts", "run000") == root / "prompts" / "run000"


def test_write_bytes_atomic_writes_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "f.json"
    write_bytes_atomic(path, b"first")
    write_bytes_atomic(path, "second — ü".encode())
    assert path.read_bytes() == "second — ü".encode()
    assert entries(path.parent) == ["f.json"]


def test_write_bytes_atomic_that_fails_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "f.json"
    write_bytes_atomic(path, b"old")
    with pytest.raises(TypeError):
        write_bytes_atomic(path, "not bytes")  # the write itself fails
    assert path.read_bytes() == b"old"
    assert entries(tmp_path) == ["f.json"]


def test_replace_dir_atomic_creates_the_folder_when_missing(tmp_path):
    final = tmp_path / "pool" / "run000"
    assert replace_dir_atomic(final, [("a.json", b"A"), ("b.json", b"B")]) == 2
    assert entries(final) == ["a.json", "b.json"]
    assert entries(final.parent) == ["run000"]


def test_replace_dir_atomic_replaces_the_folder_wholly(tmp_path):
    final = tmp_path / "pool" / "run000"
    replace_dir_atomic(final, [("old1.json", b"1"), ("keep.json", b"old"), ("old2.json", b"2")])
    assert replace_dir_atomic(final, [("keep.json", b"new"), ("fresh.json", b"F")]) == 2
    assert entries(final) == ["fresh.json", "keep.json"]
    assert (final / "keep.json").read_bytes() == b"new"
    assert entries(final.parent) == ["run000"]  # no staging or old folder left behind


def test_replace_dir_atomic_with_no_files_leaves_an_empty_folder(tmp_path):
    final = tmp_path / "pool" / "run000"
    replace_dir_atomic(final, [("x.json", b"x")])
    assert replace_dir_atomic(final, []) == 0
    assert entries(final) == []
    assert entries(final.parent) == ["run000"]


def test_replace_dir_atomic_that_fails_midway_keeps_the_old_folder_and_no_temp(tmp_path):
    final = tmp_path / "pool" / "run000"
    replace_dir_atomic(final, [("old.json", b"old")])

    def files():
        yield "new1.json", b"1"
        raise RuntimeError("source broke while writing")

    with pytest.raises(RuntimeError):
        replace_dir_atomic(final, files())
    assert entries(final) == ["old.json"]
    assert entries(final.parent) == ["run000"]


def test_state_files_are_written_one_by_one_and_stale_ones_dropped(tmp_path):
    layout = StoreLayout(tmp_path / "store")
    write_state_file(layout, "run000", "run000_ckpt1", "{}")
    write_state_file(layout, "run000", "run000_ckpt2", "{}")
    update_state_pool(layout, "run000", {"run000_ckpt2": '{"é": 1}'}, {"run000_ckpt2"})
    folder = layout.state_pool("run000")
    assert entries(folder) == ["run000_ckpt2.json"]
    assert (folder / "run000_ckpt2.json").read_bytes() == '{"é": 1}'.encode()


@given(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=2, max_size=8, unique=True))
def test_checkpoint_names_sort_in_version_order(versions: list[int]) -> None:
    """Negative, 10- and 19-digit versions alike: a table read by name is in version order."""
    names = {part_name(v): v for v in versions}
    assert len(names) == len(versions)
    assert [names[n] for n in sorted(names)] == sorted(versions)


def test_a_rejects_file_with_a_raw_line_separator_inside_a_record_still_reads(tmp_path):
    """Records are split at ``\\n`` only: a U+2028 or NEL inside one (as an older version
    wrote them) neither cuts it in two nor fails the next build that updates the file."""
    layout = StoreLayout(tmp_path)
    path = layout.rejects("r")
    path.parent.mkdir(parents=True)
    record = {"file": "r/episodes.jsonl", "line": 3, "error": "bad", "raw": "a\u2028b\x85c"}
    line = json.dumps({**record, "source": "episodes"}, ensure_ascii=False)
    path.write_text(line + "\n", encoding="utf-8")
    assert [r.raw for r in read_rejects(layout, "r")] == ["a\u2028b\x85c"]
    update_rejects(layout, "r", "snapshots", [])
    assert [r.raw for r in read_rejects(layout, "r", "episodes")] == ["a\u2028b\x85c"]


@pytest.mark.parametrize("asset", sorted(ROWS))
def test_each_named_row_has_its_tables_columns_in_order(asset):
    assert ROWS[asset]._fields == tuple(SCHEMAS[asset].names)
