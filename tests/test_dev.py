"""``make dev`` starts without warnings that do not apply, and keeps the ones that do."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from statepool_dagster.cli.dev import same_config_file

from helpers import REPO

UNUSED_CONFIG = "will not be used to configure Dagster"
SUPERSEDED = "is superseded"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_dev_output(home: Path, tmp_path: Path) -> str:
    """What ``make dev``'s command prints until the webserver serves (then it is stopped)."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    command = re.search(r"^dev:.*\n\t\$\(BIN\)/(.+)$", makefile, re.M).group(1).split()
    command[-1] = str(free_port())  # -p 3000
    assert command[:3] == ["python", "-m", "statepool_dagster.cli.dev"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        STATEPOOL_RUNS_DIR=str(tmp_path / "runs"),
        STATEPOOL_STORE_DIR=str(tmp_path / "store"),
    )
    (tmp_path / "runs").mkdir(exist_ok=True)
    log = tmp_path / f"dev-{home.name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *command[1:]],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "Serving dagster-webserver" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return log.read_text(errors="replace")


def test_make_dev_serves_without_the_two_misleading_warnings(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").symlink_to(REPO / "dagster.yaml")  # what the Makefile makes
    output = make_dev_output(home, tmp_path)
    assert UNUSED_CONFIG not in output
    assert SUPERSEDED not in output


def test_a_home_with_another_config_still_hears_that_dagster_yaml_is_unused(tmp_path):
    home = tmp_path / "other_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    assert UNUSED_CONFIG in make_dev_output(home, tmp_path)


def test_same_config_file_follows_the_link(tmp_path, monkeypatch):
    (tmp_path / "dagster.yaml").write_text("{}\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert not same_config_file(tmp_path)
    (home / "dagster.yaml").symlink_to(tmp_path / "dagster.yaml")
    assert same_config_file(tmp_path)
