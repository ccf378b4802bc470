"""`statepool sync` does what the sensors do (runs, sessions, feedback) through the real
definitions; settings are read when the code location loads and when runs start, not at import."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

from dagster import AssetKey, DagsterInstance

from statepool_dagster.core.config import Settings
from statepool_dagster.definitions import defs
from statepool_dagster.defs.resources import StatepoolSettings

from cli_helpers import cli_env, statepool
from process_helpers import REPO

PACKAGE = REPO / "statepool_dagster"
STORAGE_MODULES = {"storages/sqlite.py", "storages/batch.py", "storages/postgres.py"}


def _scores(path: Path) -> Path:
    rows = [
        {"line": 1, "state_id": "a", "score": 1.0, "agreement": 1.0, "has_reference": 1.0},
        {"line": 2, "state_id": "a", "score": 0.0, "agreement": 0.0, "has_reference": 1.0},
        {"line": 3, "state_id": "b", "score": 0.5, "agreement": 1.0, "has_reference": 1.0},
    ]
    path.write_text(json.dumps({"summary": {}, "rows": rows}))
    return path


def _state_stats(home: Path) -> dict | None:
    """The metadata of ``state_stats``'s latest materialization in the instance at ``home``."""
    with DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(AssetKey("state_stats"))
    if event is None:
        return None
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def test_sync_folds_new_feedback_into_state_stats_and_says_so(tmp_path):
    workspace = SimpleNamespace(runs=tmp_path / "runs", store=tmp_path / "store")
    workspace.runs.mkdir()
    env = cli_env(workspace, tmp_path / "home")
    statepool(env, tmp_path, "feedback", "--from-scores", str(_scores(tmp_path / "scores.json")))
    assert _state_stats(tmp_path / "home") is None  # imported, not folded yet

    report = json.loads(statepool(env, tmp_path, "sync", "--json").stdout)
    assert report["feedback"]["ran"] and report["feedback"]["ok"]
    assert (report["feedback"]["records"], report["feedback"]["states"]) == (3, 2)
    meta = _state_stats(tmp_path / "home")
    assert meta is not None and (meta["states"], meta["new_records"]) == (2, 3)

    text = statepool(env, tmp_path, "sync").stdout
    lines = {line[:16].strip(): line[16:].split() for line in text.splitlines() if line}
    assert lines["runs built"] == ["0"] and lines["sessions built"] == ["0"]
    assert lines["feedback folded"] == ["0"]  # nothing new since the last fold


def test_feedback_fold_materializes_state_stats(tmp_path):
    workspace = SimpleNamespace(runs=tmp_path / "runs", store=tmp_path / "store")
    env = cli_env(workspace, tmp_path / "home")
    scores = str(_scores(tmp_path / "scores.json"))
    done = statepool(env, tmp_path, "feedback", "--from-scores", scores, "--fold", "--json")
    assert json.loads(done.stdout)["stats"] == {
        "states": 2,
        "new_segments": 1,
        "new_records": 3,
        "bad_lines": 0,
    }
    meta = _state_stats(tmp_path / "home")
    assert meta is not None and (meta["states"], meta["new_segments"]) == (2, 1)


def test_sync_help_names_runs_sessions_and_feedback(tmp_path):
    env = cli_env(SimpleNamespace(runs=tmp_path, store=tmp_path), tmp_path / "home")
    text = statepool(env, tmp_path, "sync", "--help").stdout
    assert all(word in text for word in ("runs", "sessions", "state_stats"))


def test_the_settings_resource_has_every_setting_and_declares_none(tmp_path):
    assert list(StatepoolSettings.model_fields) == list(Settings.model_fields)
    resource = StatepoolSettings(store_dir=str(tmp_path), workers=3)
    settings = resource.settings({"STATEPOOL_WORKERS": "5", "STATEPOOL_DATASET": "x"})
    assert (settings.store_dir, settings.workers, settings.dataset) == (str(tmp_path), 3, "x")
    source = (PACKAGE / "defs" / "resources.py").read_text()
    assert not [f for f in Settings.model_fields if f"{f}:" in source]


def test_definitions_read_the_sensor_interval_when_loaded(monkeypatch):
    monkeypatch.setenv("STATEPOOL_SENSOR_INTERVAL", "7")
    loaded = defs()
    assert loaded.resolve_sensor_def("runs_sensor").minimum_interval_seconds == 7
    assert loaded.resolve_sensor_def("sessions_sensor").minimum_interval_seconds == 7
    monkeypatch.setenv("STATEPOOL_SENSOR_INTERVAL", "40")
    assert defs().resolve_sensor_def("runs_sensor").minimum_interval_seconds == 40
    assert defs().resolve_sensor_def("sessions_sensor").minimum_interval_seconds == 15
    monkeypatch.setenv("STATEPOOL_SENSOR_INTERVAL", "0")  # out of range: the default, still loads
    assert defs().resolve_sensor_def("runs_sensor").minimum_interval_seconds == 30


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text())


def test_private_dagster_is_imported_by_the_storage_modules_alone():
    private = set()
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            if any(m.startswith("dagster._") for m in modules):
                private.add(name)
    assert private <= STORAGE_MODULES, private - STORAGE_MODULES


def test_only_the_settings_module_reads_statepool_variables():
    readers = set()
    for name, tree in _modules():
        reads_env = any(
            isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
            for node in ast.walk(tree)
        )
        names_ours = any(
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("STATEPOOL_")
            for node in ast.walk(tree)
        )
        if reads_env and names_ours:
            readers.add(name)
    assert readers <= {"core/config.py"}, readers
