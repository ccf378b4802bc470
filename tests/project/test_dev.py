"""Dagster's own commands on this project: ``make dev`` is ``dg dev``; ``dg check``, ``dg list``
and ``dg launch``.

The repository's root is a dg project (``[tool.dg]`` in pyproject.toml) whose code location
is ``statepool_dagster/definitions.py``, the one workspace.yaml names. Its ``.env`` (written by
``make install``) sends ``dg`` to the instance ``statepool`` uses when no ``DAGSTER_HOME`` is
set; ``make dev`` stops its webserver and daemon on SIGTERM and on SIGINT, in the background
too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from statepool_dagster.cli.dg_home import ENV_FILE, write_dg_env
from statepool_dagster.cli.dg_home import main as dg_home

from cli_helpers import STATEPOOL
from process_helpers import BIN, REPO, free_port, start_group, stop_group, wait_until

ASSETS = {"run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts"}
SUPERSEDED = "is superseded"
VENV_MISMATCH = "does not match the virtual environment"  # dg, when no venv is active


def dg_env(tmp_path: Path) -> dict[str, str]:
    """A fresh instance home linked to ./dagster.yaml (as the Makefile makes it), empty runs."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").symlink_to(REPO / "dagster.yaml")
    (tmp_path / "runs").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        STATEPOOL_RUNS_DIR=str(tmp_path / "runs"),
        STATEPOOL_STORE_DIR=str(tmp_path / "store"),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def dg(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(BIN / "dg"), *args],
        cwd=REPO,
        env=dg_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def test_dg_sees_the_code_location_workspace_yaml_names():
    import tomli

    dg_project = tomli.loads((REPO / "pyproject.toml").read_text())["tool"]["dg"]["project"]
    [entry] = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    module = entry["python_module"]
    assert dg_project["code_location_target_module"] == module["module_name"]
    assert dg_project["code_location_name"] == module["location_name"]
    assert module["attribute"] == "defs"


def test_dg_check_defs_passes(tmp_path):
    done = dg(tmp_path, "check", "defs")
    assert "All definitions loaded successfully" in done.stdout + done.stderr


def test_dg_list_defs_lists_the_assets_checks_jobs_and_sensors(tmp_path):
    listed = json.loads(dg(tmp_path, "list", "defs", "--json").stdout)
    assert {a["asset_key"] for a in listed["assets"]} == ASSETS | {
        "training_dataset",
        "session_states",
        "session_prompts",
        "state_stats",
    }
    assert {c["key"] for c in listed["asset_checks"]} == {
        "checkpoint_states:inputs_clean",
        "curator_prompts:states_complete",
        "session_states:no_rejects",
        "session_prompts:every_state_has_prompt",
    }
    assert {j["name"] for j in listed["jobs"]} == {
        "statepool_job",
        "statepool_sessions_job",
        "state_stats_job",
    }
    assert {s["name"] for s in listed["sensors"]} == {
        "runs_sensor",
        "sessions_sensor",
        "feedback_sensor",
        "training_dataset_automation",
    }


def test_an_installed_copy_without_the_project_file_loads_the_same_definitions(tmp_path):
    """A wheel has no pyproject.toml for ``load_from_defs_folder`` to find: the same folder
    is loaded, the same definitions."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "statepool_dagster", site / "statepool_dagster")
    listing = (
        "import statepool_dagster; print(statepool_dagster.__file__)\n"
        "from statepool_dagster.definitions import defs; d = defs(); r = d.get_repository_def()\n"
        "print(sorted(k.to_user_string() for k in d.resolve_asset_graph().get_all_asset_keys()))\n"
        "print(sorted(j.name for j in r.get_all_jobs()), sorted(s.name for s in r.sensor_defs))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEPOOL_")}

    def listed(root: Path) -> list[str]:
        done = subprocess.run(
            [str(BIN / "python"), "-W", "error::DeprecationWarning", "-c", listing],
            cwd=tmp_path, env={**env, "PYTHONPATH": str(root)}, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout.splitlines()

    installed, checkout = listed(site), listed(REPO)
    assert installed[0].startswith(str(site)) and checkout[0].startswith(str(REPO))
    assert installed[1:] == checkout[1:] and "runs_sensor" in installed[2]


@pytest.mark.slow
def test_dg_launch_materializes_one_run_partition_by_asset_selection(tmp_path):
    """``dg launch --assets ... --partition``: Dagster's own selection parser (which a
    shared venv with the trainer extra's antlr4 4.9 would break) on a registered run."""
    from dagster import DagsterInstance

    from statepool_dagster import load_prompts
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

    env = dg_env(tmp_path)
    spec = SampleSpec(n_runs=1, n_checkpoints=2, n_cards=3, emb_dim=4)
    generate_run(tmp_path / "runs" / "run000", spec, 0)
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        instance.add_dynamic_partitions("runs", ["run000"])  # as the sensor or a sync would
    done = subprocess.run(
        [str(BIN / "dg"), "launch", "--assets", ",".join(sorted(ASSETS)), "--partition", "run000"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    prompts = load_prompts(tmp_path / "store")
    assert sorted(prompts["state_id"]) == ["run000_ckpt0", "run000_ckpt1"]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["data"]


def _answers(port: int) -> bool:
    try:
        graphql(port, "{ version }")
    except OSError:  # URLError included: not listening yet
        return False
    return True


def _stats() -> list[tuple[int, int, int]]:
    """``(pid, parent pid, process group)`` of every live process, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while listed
        if fields[0] != "Z":
            found.append((int(stat.parent.name), int(fields[1]), int(fields[2])))
    return found


def _group(pgid: int) -> list[int]:
    return [pid for pid, _, group in _stats() if group == pgid]


def _dev_command(port: int) -> list[str]:
    """``make dev``'s recipe, on ``port``."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    command = re.search(r"^dev:.*\n\t\$\(BIN\)/(.+)$", makefile, re.M).group(1).split()
    assert command == ["python", "-m", "tools.dg_dev", "--host", "127.0.0.1", "--port", "3000"]
    return [str(BIN / command[0]), *command[1:-1], str(port)]


def _serve(port: int, tmp_path: Path, ignore_sigint: bool):
    """``make dev``'s command started as a shell starts it (a background job: SIGINT ignored)."""
    log = tmp_path / "dev.log"
    handler = signal.SIG_IGN if ignore_sigint else signal.SIG_DFL
    previous = signal.signal(signal.SIGINT, handler)  # what the child inherits
    try:
        proc = start_group(_dev_command(port), dg_env(tmp_path), log)
    finally:
        signal.signal(signal.SIGINT, previous)
    wait_until(
        lambda: "Serving dagster-webserver" in log.read_text(errors="replace"), 180, proc, log
    )
    # The webserver says so just before its socket listens: wait for an answer too.
    wait_until(lambda: _answers(port), 60, proc, log)
    return proc, log


def _stops_within_10_s(proc: subprocess.Popen, log: Path, signum: int, port: int) -> None:
    """``signum`` to ``make dev``'s command ends it, webserver and daemon included, in 10 s."""
    [dg_dev] = [pid for pid, parent, _ in _stats() if parent == proc.pid]
    servers = _group(dg_dev)  # dg dev's own group, not the wrapper's
    assert dg_dev in servers and proc.pid not in servers
    assert len(servers) >= 3, servers  # dg dev, the webserver, the daemon (and code servers)
    started = time.monotonic()
    os.kill(proc.pid, signum)
    assert proc.wait(timeout=10) == 0, log.read_text(errors="replace")[-3000:]  # as asked
    while _group(dg_dev) and time.monotonic() - started < 10:
        time.sleep(0.2)
    assert not _group(dg_dev), log.read_text(errors="replace")[-3000:]
    assert not _answers(port)
    assert "Shutting down Dagster services" in log.read_text(errors="replace")  # Ctrl-C's path


@pytest.mark.slow
def test_make_dev_is_dg_dev_on_loopback_serving_the_code_location_until_sigterm(tmp_path):
    port = free_port()
    proc, log = _serve(port, tmp_path, ignore_sigint=True)
    try:
        query = "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }"
        entries = graphql(port, query)["workspaceOrError"]["locationEntries"]
        assert [e["name"] for e in entries] == ["statepool_dagster"]
        query = "{ assetNodes { assetKey { path } } }"
        keys = {n["assetKey"]["path"][-1] for n in graphql(port, query)["assetNodes"]}
        assert keys >= ASSETS
        _stops_within_10_s(proc, log, signal.SIGTERM, port)  # `kill %1`, `kill <pid>`
    finally:
        stop_group(proc)
    assert SUPERSEDED not in log.read_text(errors="replace")
    assert VENV_MISMATCH not in log.read_text(errors="replace")


@pytest.mark.slow
def test_make_dev_stops_on_ctrl_c(tmp_path):
    port = free_port()
    proc, log = _serve(port, tmp_path, ignore_sigint=False)
    try:
        _stops_within_10_s(proc, log, signal.SIGINT, port)
    finally:
        stop_group(proc)


def test_dg_env_line_points_dagster_home_at_the_instance_unless_one_is_set(tmp_path, monkeypatch):
    from dotenv import dotenv_values  # what Dagster's commands read .env with

    (tmp_path / "pyproject.toml").write_text("[tool.dg]\ndirectory_type = 'project'\n")
    env = tmp_path / ENV_FILE
    env.write_text("MY_SETTING=1\n")
    home = tmp_path / "project home" / ".dagster_home"
    assert dg_home([str(home), str(tmp_path)]) == 0
    assert not write_dg_env(tmp_path, home)  # written once
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert dotenv_values(env) == {"MY_SETTING": "1", "DAGSTER_HOME": str(home)}
    monkeypatch.setenv("DAGSTER_HOME", "/elsewhere")  # set in the environment: it wins
    assert dotenv_values(env)["DAGSTER_HOME"] == "/elsewhere"
    monkeypatch.delenv("DAGSTER_HOME")
    assert write_dg_env(tmp_path, tmp_path / "moved")  # the folder moved: the line follows
    assert dotenv_values(env) == {"MY_SETTING": "1", "DAGSTER_HOME": str(tmp_path / "moved")}
    env.write_text("DAGSTER_HOME=/mine\n")  # a line of the user's own stays
    assert not write_dg_env(tmp_path, home) and env.read_text() == "DAGSTER_HOME=/mine\n"
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert dg_home([str(home), str(tmp_path)]) == 2  # not a dg project: nothing written


@pytest.mark.slow
def test_dg_launch_opens_the_instance_statepool_uses_with_no_variable_set(tmp_path):
    """A project folder as a clone has it, `make install` run, no DAGSTER_* or STATEPOOL_*."""
    from dagster import DagsterInstance, RunsFilter

    from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "dagster.yaml", "workspace.yaml"):
        shutil.copy(REPO / name, project / name)
    (project / "statepool_dagster").symlink_to(REPO / "statepool_dagster")
    generate_runs(project / "runs", SampleSpec(n_runs=2, n_checkpoints=2, n_cards=3, emb_dim=4))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            args, cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        return done

    run(str(STATEPOOL), "sync", "-q")  # ./.dagster_home, as `make demo` leaves it
    home = project / ".dagster_home"
    run(str(BIN / "python"), "-m", "statepool_dagster.cli.dg_home", str(home))  # make install
    run(str(BIN / "dg"), "launch", "--job", "statepool_job", "--partition", "run001")
    listed = json.loads(run(str(BIN / "dg"), "list", "defs", "--json").stdout)
    assert "statepool_job" in {j["name"] for j in listed["jobs"]}
    run(str(BIN / "dg"), "check", "defs")
    with DagsterInstance.from_config(str(home)) as instance:
        launched = instance.get_run_records(
            RunsFilter(job_name="statepool_job", tags={"dagster/partition": "run001"})
        )
        # dg launch's run, in this instance (the sync's runs name a range of partitions)
        assert [r.dagster_run.status.value for r in launched] == ["SUCCESS"]
    assert not list(project.glob(".tmp_dagster_home_*"))
