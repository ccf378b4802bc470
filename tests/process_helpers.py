"""Processes the tests start: the checkout and its binaries, process groups, a free port, and
what to do when something a test needs is missing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]


BIN = Path(sys.executable).parent


def unavailable(reason: str, needs: str) -> NoReturn:
    """Skip a test that lacks ``needs`` (a server, an extra); under ``CI=true``, fail it."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the tests needing {needs} must run, not skip)")
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_group(args: list[str], env: dict[str, str], log: Path, cwd: Path = REPO):
    """Start ``args`` in a session of its own (its children too), output to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_group(proc: subprocess.Popen) -> None:
    """Stop ``proc`` and everything it started (its process group): TERM, then KILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def process_group(args: list[str], env: dict[str, str], log: Path, cwd: Path = REPO):
    """A process in its own session for the ``with`` block; its whole group is ended on exit."""
    proc = start_group(args, env, log, cwd)
    try:
        yield proc
    finally:
        stop_group(proc)


def daemon(env: dict[str, str], log: Path) -> AbstractContextManager[subprocess.Popen]:
    """``dagster-daemon run`` on this checkout's workspace.yaml, as a ``process_group``."""
    return process_group(
        [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")], env, log
    )


def wait_until(
    condition: Callable[[], bool], timeout: float, proc: subprocess.Popen, log: Path
) -> None:
    """Poll ``condition`` each second; fail with the log's tail if ``proc`` exits or time is up."""
    deadline = time.monotonic() + timeout
    while not condition():
        tail = log.read_text(errors="replace")[-4000:]
        assert proc.poll() is None, f"{proc.args[0]} exited:\n{tail}"
        assert time.monotonic() < deadline, f"timed out after {timeout}s:\n{tail}"
        time.sleep(1)
