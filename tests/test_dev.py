"""Dagster's own commands on this project: ``make dev`` is ``dg dev``; ``dg check`` and ``dg list``.

The repository's root is a dg project (``[tool.dg]`` in pyproject.toml) whose code location
is ``statepool_dagster/definitions.py``, the one workspace.yaml names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from helpers import BIN, REPO, free_port, process_group, wait_until

ASSETS = {"run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts"}
SUPERSEDED = "is superseded"


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


@pytest.mark.slow
def test_make_dev_is_dg_dev_on_loopback_serving_the_code_location(tmp_path):
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    command = re.search(r"^dev:.*\n\t\$\(BIN\)/(.+)$", makefile, re.M).group(1).split()
    assert command == ["dg", "dev", "--host", "127.0.0.1", "--port", "3000"]
    port = free_port()
    command[-1] = str(port)
    log = tmp_path / "dev.log"
    with process_group([str(BIN / command[0]), *command[1:]], dg_env(tmp_path), log) as proc:
        wait_until(
            lambda: "Serving dagster-webserver" in log.read_text(errors="replace"), 180, proc, log
        )
        # The webserver says so just before its socket listens: wait for an answer too.
        wait_until(lambda: _answers(port), 60, proc, log)
        query = "{ workspaceOrError { ... on Workspace { locationEntries { name } } } }"
        entries = graphql(port, query)["workspaceOrError"]["locationEntries"]
        assert [e["name"] for e in entries] == ["statepool_dagster"]
        query = "{ assetNodes { assetKey { path } } }"
        keys = {n["assetKey"]["path"][-1] for n in graphql(port, query)["assetNodes"]}
        assert keys >= ASSETS
    assert SUPERSEDED not in log.read_text(errors="replace")
