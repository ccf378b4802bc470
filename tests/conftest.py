"""Shared fixtures: real run folders, a real persistent instance, the original script."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SEED_PATH = REPO.parent / "shared" / "reference" / "statepool_seed.py"


@dataclass
class Workspace:
    """A runs folder and a store folder, wired into the STATEPOOL_* environment."""

    root: Path
    runs: Path
    store: Path

    def run(self, name: str) -> Path:
        return self.runs / name


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    runs, store = tmp_path / "runs", tmp_path / "store"
    runs.mkdir()
    monkeypatch.setenv("STATEPOOL_RUNS_DIR", str(runs))
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(store))
    return Workspace(tmp_path, runs, store)


@pytest.fixture
def instance(tmp_path: Path):
    """A persistent SQLite instance in a temp DAGSTER_HOME (it has a ref, like the daemon's)."""
    from dagster import instance_for_test

    home = tmp_path / "dagster_home"
    home.mkdir()
    with instance_for_test(temp_dir=str(home)) as inst:
        yield inst


@pytest.fixture(scope="session")
def seed() -> ModuleType:
    """The original script, loaded from ../shared/reference (never copied into the project)."""
    if not SEED_PATH.is_file():
        pytest.skip(f"original script not found at {SEED_PATH}")
    spec = importlib.util.spec_from_file_location("statepool_seed", SEED_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("statepool_seed", module)
    spec.loader.exec_module(module)
    return module
