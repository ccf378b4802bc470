"""SIGINT and SIGTERM end ``statepool sync``: no further batch, no one-by-one retry.

While a Dagster run executes, Dagster installs its own handlers (the run's steps
stop with ``DagsterExecutionInterruptedError``, the run is marked failed) and ours
never hear of the signal. Python's wakeup file descriptor does: the interpreter's C
handler writes every signal's number to it, whichever Python handler is installed,
so after each Dagster run :func:`raise_if_signalled` knows whether to go on.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The sync was told to stop by a signal; ``exit_code`` is the shell's ``128 + signum``."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_wakeup: list[int] = []  # the read end of the pipe, while watch_signals is active


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def watch_signals() -> Iterator[None]:
    """Within: SIGINT/SIGTERM raise :class:`Interrupted`, also when they arrive mid-run."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous = {s: signal.signal(s, _raise) for s in STOP_SIGNALS}
    old_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _wakeup.append(read_end)
    try:
        yield
    finally:
        _wakeup.remove(read_end)
        signal.set_wakeup_fd(old_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.close(read_end)
        os.close(write_end)


def raise_if_signalled() -> None:
    """Raise :class:`Interrupted` if SIGINT or SIGTERM arrived since the last call."""
    if not _wakeup:
        return
    try:
        received = os.read(_wakeup[-1], 512)
    except BlockingIOError:
        return
    for signum in received:
        if signum in STOP_SIGNALS:
            raise Interrupted(signum)
