"""Stores compared: the original script's pool and ours, every file of a store, a state made up."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType


def seed_pool(seed: ModuleType, runs: Path, out: Path) -> dict[str, dict[str, bytes]]:
    """What the original script writes for each run: ``{run: {file name: bytes}}``."""
    pools: dict[str, dict[str, bytes]] = {}
    for run_dir in sorted(p for p in runs.iterdir() if (p / "episodes.jsonl").is_file()):
        target = out / run_dir.name
        seed.collect_from_run(str(run_dir), str(target))
        pools[run_dir.name] = {p.name: p.read_bytes() for p in target.glob("*.json")}
        shutil.rmtree(target)
    return pools


def store_pool(store: Path) -> dict[str, dict[str, bytes]]:
    """The state-pool files in our store: ``{run: {file name: bytes}}``."""
    root = store / "state_pool"
    if not root.is_dir():
        return {}
    return {
        d.name: {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith(".")}
        for d in root.iterdir()
        if d.is_dir() and not d.name.startswith(".")
    }


def generated_state(k: int) -> dict:
    """A small state as the original's ``to_json`` writes it, not from any run: ``gen-<k>``."""
    return {
        "state_id": f"gen-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": []},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}"}],
        "analysis": None,
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }


def store_files(root) -> dict[str, bytes]:
    """Every visible file under a store root, local or not: ``{relative path: bytes}``.

    Hidden names (locks, temp files, manifests) are left out, as every reader leaves them,
    and so is the pool report (report/index.html: a page naming its store and time).
    """
    from statepool_dagster.core.locations import as_path, is_local

    root = as_path(root)
    if is_local(root):
        paths = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    else:
        base = root.path.rstrip("/") + "/"
        paths = {
            name[len(base) :]: root.joinpath(*name[len(base) :].split("/"))
            for name in root.fs.find(root.path)
        }
    return {
        rel: path.read_bytes()
        for rel, path in sorted(paths.items())
        if not any(part.startswith(".") for part in rel.split("/"))
        and not rel.startswith("report/")
    }


def assert_same_store(store, expected: Path) -> None:
    """Same files; JSON and JSONL byte for byte; Parquet tables equal, metadata included."""
    from statepool_dagster.core.locations import as_path
    from statepool_dagster.core.store.atomic import read_parquet

    ours, theirs = store_files(store), store_files(expected)
    assert sorted(ours) == sorted(theirs)
    for rel, data in ours.items():
        if rel.endswith(".parquet"):
            table = read_parquet(as_path(store).joinpath(*rel.split("/")))
            assert table.equals(read_parquet(expected / rel), check_metadata=True), rel
        else:
            assert data == theirs[rel], rel
