"""SIGINT and SIGTERM end ``statepool sync``: no further batch, no one-by-one retry.

While a Dagster run executes, Dagster installs its own handlers (the run's steps
stop with ``DagsterExecutionInterruptedError``, the run is marked failed) and ours
never hear of the signal. Python's wakeup file descriptor does: the interpreter's C
handler writes every signal's number to it, whichever Python handler is installed,
so after each Dagster run :func:`raise_if_signalled` knows whether to go on.

A thread reading that descriptor also passes the signal on to this process's
children (the stage's forked workers, which would otherwise finish their work while
the run waits for them), as a terminal's Ctrl-C reaches its whole process group;
a child still alive :data:`GRACE_SECONDS` later is killed. Store files are written
under hidden temporary names and renamed whole, so nothing half-written is ever seen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 2.0


class Interrupted(Exception):
    """The sync was told to stop by a signal; ``exit_code`` is the shell's ``128 + signum``."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_received: list[int] = []  # stop signals seen while watch_signals is active


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _children() -> list[int]:
    """This process's child processes (Linux ``/proc``; elsewhere none are known)."""
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            pids.extend(int(pid) for pid in task.read_text().split())
    return pids


def _signal_children(signum: int) -> None:
    for pid in _children():
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def _stop_children(signum: int) -> None:
    """Pass ``signum`` on to the children; kill the ones still there after the grace time."""
    _signal_children(signum)
    deadline = time.monotonic() + GRACE_SECONDS
    while _children() and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_children(signal.SIGKILL)


def _watch(read_end: int) -> None:
    while True:
        try:
            data = os.read(read_end, 512)
        except OSError:
            return
        if not data or 0 in data:  # closed, or told to stop watching
            return
        for signum in data:
            if signum in STOP_SIGNALS and not _received:
                _received.append(signum)
                threading.Thread(target=_stop_children, args=(signum,), daemon=True).start()


@contextlib.contextmanager
def watch_signals() -> Iterator[None]:
    """Within: SIGINT/SIGTERM raise :class:`Interrupted`, also when they arrive mid-run."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = {s: signal.signal(s, _raise) for s in STOP_SIGNALS}
    old_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(read_end,), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.write(write_end, b"\0")
        watcher.join(timeout=5)
        os.close(read_end)
        os.close(write_end)
        _received.clear()


def raise_if_signalled() -> None:
    """Raise :class:`Interrupted` if SIGINT or SIGTERM arrived while watching."""
    if _received:
        raise Interrupted(_received[0])
