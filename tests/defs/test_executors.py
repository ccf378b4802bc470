"""``STATEPOOL_EXECUTOR`` picks the jobs' executor when the code location loads.

Celery execution itself, on real workers, is tested in tests/project/test_celery.py.
"""

from __future__ import annotations

import subprocess

import pytest
from dagster import in_process_executor

from statepool_dagster.defs.executors import statepool_executor

from cli_helpers import cli_env
from process_helpers import BIN, REPO

BROKER = "redis://127.0.0.1:6390/0"


def test_in_process_is_the_default():
    assert statepool_executor({}) is in_process_executor
    assert statepool_executor({"STATEPOOL_EXECUTOR": "in_process"}) is in_process_executor


def test_celery_is_chosen_by_the_environment_alone():
    # Another setting's bad value is for the runs to report, not the executor.
    env = {
        "STATEPOOL_EXECUTOR": "celery",
        "STATEPOOL_CELERY_BROKER": BROKER,
        "STATEPOOL_MAX_OPS": "x",
    }
    assert statepool_executor(env).name == "statepool_celery"


BAD_SETTINGS = [
    (
        {"STATEPOOL_EXECUTOR": "dask"},
        "STATEPOOL_EXECUTOR: Input should be 'in_process' or 'celery'",
    ),
    (
        {"STATEPOOL_EXECUTOR": "celery"},
        "STATEPOOL_CELERY_BROKER: required when STATEPOOL_EXECUTOR=celery",
    ),
    (
        {"STATEPOOL_EXECUTOR": "celery", "STATEPOOL_CELERY_BROKER": "127.0.0.1:6390"},
        "STATEPOOL_CELERY_BROKER: not a URL: '127.0.0.1:6390' (e.g. redis://127.0.0.1:6379/0)",
    ),
    (
        {
            "STATEPOOL_EXECUTOR": "celery",
            "STATEPOOL_CELERY_BROKER": BROKER,
            "STATEPOOL_CELERY_BACKEND": "rpc",
        },
        "STATEPOOL_CELERY_BACKEND: not a URL: 'rpc' (e.g. redis://127.0.0.1:6379/0)",
    ),
]


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
def test_statepool_sync_names_a_bad_executor_setting_in_one_line(
    workspace, tmp_path, settings, message
):
    env = {**cli_env(workspace, tmp_path / "home"), **settings}
    done = subprocess.run(
        [str(BIN / "statepool"), "sync"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (2, f"statepool sync: {message}\n")


def test_a_bad_executor_setting_loads_and_fails_each_run_at_its_start(workspace, tmp_path):
    """The code location still loads (no traceback in place of the UI); runs say what is wrong."""
    from dagster import DagsterInstance, DagsterRunStatus

    home = tmp_path / "home"
    env = {**cli_env(workspace, home), "STATEPOOL_EXECUTOR": "dask"}
    workspace_file = str(REPO / "workspace.yaml")
    dagster = str(BIN / "dagster")
    loads = subprocess.run(
        [dagster, "definitions", "validate", "-w", workspace_file],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert loads.returncode == 0, loads.stderr[-4000:]
    module = ("-m", "statepool_dagster.definitions", "-a", "defs")
    run = subprocess.run(
        [dagster, "job", "execute", "-j", "statepool_job", *module],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0
    with DagsterInstance.from_config(str(home)) as instance:
        [failed] = instance.get_runs()
        assert failed.status == DagsterRunStatus.FAILURE
        [failure] = [
            e.dagster_event
            for e in instance.all_logs(failed.run_id)
            if e.dagster_event and e.dagster_event.is_run_failure
        ]
    assert "failure in initializing the executor" in failure.message
    error = failure.job_failure_data.error
    assert error.message.strip().endswith(BAD_SETTINGS[0][1])
