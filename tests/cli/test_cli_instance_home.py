"""The instance a ``statepool`` command sets up, installed any way (``pip install``, no
``make``): a new home gets the project's instance settings (telemetry off, as Dagster
documents it), and in a dg project the ``.env`` line that sends ``dg dev`` and ``dg launch``
to it, so no Dagster banner or warning reaches a new user."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from statepool_dagster.cli.console import INSTANCE_CONFIG
from statepool_dagster.cli.main import ui_command

from cli_helpers import STATEPOOL
from process_helpers import REPO

WARNINGS = ("telemetry", "No dagster instance configuration file", "Traceback")


def _sync(folder: Path) -> subprocess.CompletedProcess:
    """``statepool sync`` in ``folder`` as a pip-installed user runs it: no DAGSTER_HOME."""
    (folder / "runs").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(STATEPOOL_RUNS_DIR=str(folder / "runs"), STATEPOOL_STORE_DIR=str(folder / "store"))
    done = subprocess.run(
        [str(STATEPOOL), "sync", "-q"], cwd=folder, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def test_the_settings_a_new_home_gets_are_the_repositorys_dagster_yaml():
    assert yaml.safe_load(INSTANCE_CONFIG) == yaml.safe_load((REPO / "dagster.yaml").read_text())


def test_a_new_home_outside_the_repository_gets_its_settings_and_no_banner(tmp_path):
    done = _sync(tmp_path)
    config = yaml.safe_load((tmp_path / ".dagster_home" / "dagster.yaml").read_text())
    assert config["telemetry"] == {"enabled": False}
    for warning in WARNINGS:
        assert warning not in done.stderr, done.stderr
    assert not (tmp_path / ".env").exists(), "not a dg project: no .env"


def test_in_a_dg_project_the_first_sync_writes_the_env_line_dg_reads(tmp_path, monkeypatch):
    from dotenv import dotenv_values  # what Dagster's commands read .env with

    (tmp_path / "pyproject.toml").write_text("[tool.dg]\ndirectory_type = 'project'\n")
    done = _sync(tmp_path)
    home = tmp_path / ".dagster_home"
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # `make test` exports the repo's own
    assert dotenv_values(tmp_path / ".env") == {"DAGSTER_HOME": str(home)}
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    assert dotenv_values(tmp_path / ".env") == {"DAGSTER_HOME": str(tmp_path / "elsewhere")}, (
        "a DAGSTER_HOME set in the environment wins over the line"
    )
    assert f"{tmp_path / '.env'}: DAGSTER_HOME defaults to {home}" in done.stderr
    again = _sync(tmp_path)
    assert ".env" not in again.stderr, "said once"


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"Makefile": "dev: install\n\tdg dev\n"}, "make dev"),
        ({"pyproject.toml": "[tool.dg]\ndirectory_type = 'project'\n"}, "dg dev"),
        ({}, "dagster dev -m statepool_dagster.definitions"),
    ],
)
def test_the_demo_names_a_ui_command_that_exists_where_it_ran(tmp_path, monkeypatch, files, says):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / ".dagster_home"))
    assert says in ui_command()
    if not files:
        assert ui_command().startswith(f"DAGSTER_HOME={tmp_path / '.dagster_home'} ")


def test_a_home_written_before_the_storages_moved_keeps_loading(tmp_path):
    """A pip user's home holds the dagster.yaml statepool wrote, naming the event-log storage's
    old module: the next command points it at the new one, and the instance opens."""
    home = tmp_path / ".dagster_home"
    home.mkdir()
    moved = "module: statepool_dagster.storages.sqlite\n"
    old = INSTANCE_CONFIG.replace(moved, "module: statepool_dagster.defs.storage\n")
    assert old != INSTANCE_CONFIG
    (home / "dagster.yaml").write_text(old)
    done = _sync(tmp_path)
    assert (home / "dagster.yaml").read_text() == INSTANCE_CONFIG
    assert "the event-log storage is now statepool_dagster.storages.sqlite" in done.stderr
    assert "storage is now" not in _sync(tmp_path).stderr, "said once"


def test_a_dagster_yaml_of_the_users_own_is_never_rewritten(tmp_path):
    from statepool_dagster.cli.console import _move_storage_module

    config = tmp_path / "dagster.yaml"
    text = "event_log_storage:\n  module: statepool_dagster.defs.storage\n  class: X\n"
    config.write_text(text)
    _move_storage_module(config)
    assert config.read_text() == text
