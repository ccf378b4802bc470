"""SIGINT and SIGTERM end ``statepool sync``: no further batch, no one-by-one retry.

While a Dagster run executes, Dagster's own handler takes both signals (the run's step stops
with ``DagsterExecutionInterruptedError``) and ours never hears of them. Python's wakeup file
descriptor does: the interpreter writes every signal's number to it, whichever handler is
installed. A thread reading it keeps the signal for :func:`raise_if_signalled`, called between
runs, and passes it on to this process's children (the stage's forked workers, which a
terminal's Ctrl-C reaches through the process group but a ``kill`` does not); a child still
alive :data:`GRACE_SECONDS` later is killed. Store files are written under hidden temporary
names and renamed whole, so nothing half-written is ever seen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 2.0
_received: list[int] = []  # stop signals seen while watch_signals is active


class Interrupted(Exception):
    """The sync was told to stop by a signal; ``exit_code`` is the shell's ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.exit_code = 128 + signum


def _raise(signum: int, _frame) -> None:
    raise Interrupted(signum)


def _children() -> list[int]:
    """This process's child processes (Linux ``/proc``; elsewhere none are known)."""
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            pids.extend(int(pid) for pid in task.read_text().split())
    return pids


def _stop_children(signum: int) -> None:
    """Pass ``signum`` on to the children; kill the ones still there after the grace time."""
    deadline = time.monotonic() + GRACE_SECONDS
    for sent in (signum, signal.SIGKILL):
        for pid in _children():
            with contextlib.suppress(OSError):
                os.kill(pid, sent)
        while _children() and time.monotonic() < deadline:
            time.sleep(0.1)


def _watch(read_end: int) -> None:
    while data := os.read(read_end, 512):  # empty once the write end is closed
        for signum in data:
            if signum in STOP_SIGNALS and not _received:
                _received.append(signum)
                threading.Thread(target=_stop_children, args=(signum,), daemon=True).start()
    os.close(read_end)


@contextlib.contextmanager
def watch_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise :class:`Interrupted`, mid-run once the run is over."""
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
        os.close(write_end)
        # The signals already in the pipe read before forgetting them, so none outlives the
        # watch (a forked worker still holding the write end only delays the end of file).
        watcher.join(GRACE_SECONDS)
        _received.clear()


def raise_if_signalled() -> None:
    """Raise :class:`Interrupted` if SIGINT or SIGTERM arrived while watching."""
    if _received:
        raise Interrupted(_received[0])
