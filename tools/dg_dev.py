"""``make dev``: ``dg dev`` (webserver and daemon) that stops on Ctrl-C and on SIGTERM alike.

``dagster dev`` shuts its webserver and daemon down on SIGINT and maps SIGTERM to whatever
SIGINT does; a shell starts a background job with SIGINT ignored, and there both signals
would be ignored, leaving the two servers to be killed one by one. Here ``dg dev`` runs in a
process group of its own with SIGINT restored; SIGINT, SIGTERM or SIGHUP to this wrapper
(or to its group: a terminal's Ctrl-C, ``kill %1``, ``make``'s own forwarding) becomes one
SIGINT to ``dg dev``'s group, as a terminal's Ctrl-C sends it, which stops both servers.
Whatever of the group is still there after ``GRACE`` seconds (or a second signal), or once
``dg dev`` exited, is ended. Exit code: 0 when a signal stopped it (the stop asked for, so
``make`` reports no error), else ``dg dev``'s own.

``dg dev`` runs as from the activated venv this wrapper runs in (``VIRTUAL_ENV`` and ``PATH``
set as ``activate`` sets them): ``dg`` compares the active venv with the project's
``.venv`` and warns, once per process it starts, when none is active.

Usage (from the repository's root): ``python -m tools.dg_dev [dg dev options]``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE = 6.0  # seconds for dg dev to stop its servers; then its group is ended (7 s at most)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_group(proc: subprocess.Popen, grace: float, received: list[int]) -> None:
    """Give ``dg dev`` ``grace`` seconds to stop (cut short by a second signal), then end
    what is left of its group.

    Its code servers outlive it until their heartbeat times out: they get SIGTERM at once,
    and SIGKILL a second later.
    """
    deadline = time.monotonic() + grace
    signals = len(received)
    while proc.poll() is None and time.monotonic() < deadline and len(received) == signals:
        time.sleep(0.1)
    for signum, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0)):
        proc.poll()  # reaped, so that a dg dev that has exited no longer counts
        if not _group_alive(proc.pid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)
        until = time.monotonic() + wait
        while proc.poll() is None or _group_alive(proc.pid):
            if time.monotonic() >= until:
                break
            time.sleep(0.1)
    proc.wait()


def main(argv: list[str]) -> int:
    received: list[int] = []
    for signum in STOP_SIGNALS:
        # A handler of our own, not SIG_IGN: the child starts with the default disposition.
        signal.signal(signum, lambda sig, _frame: received.append(sig))
    dg = Path(sys.executable).with_name("dg")
    env = {
        **os.environ,
        "VIRTUAL_ENV": sys.prefix,
        "PATH": os.pathsep.join([str(dg.parent), os.environ.get("PATH", "")]),
    }
    proc = subprocess.Popen([str(dg), "dev", *argv], start_new_session=True, env=env)
    while not received:
        try:
            proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        break
    if received:
        print(f"\ndg_dev: {signal.Signals(received[0]).name}: stopping dg dev", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):  # as a terminal's Ctrl-C reaches it
            os.killpg(proc.pid, signal.SIGINT)
    _end_group(proc, GRACE if received else 0.0, received)
    return 0 if received else proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
