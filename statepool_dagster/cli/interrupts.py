"""SIGINT and SIGTERM end ``statepool sync``: no further batch, no one-by-one retry.

While a Dagster run executes, Dagster's own handler takes both signals (the step stops, and the
stage's pool stops its workers); ours never hears of them, but Python's wakeup file descriptor
does, whichever handler is installed: :func:`raise_if_signalled`, between runs, reads it. Store
files are written under hidden temporary names and renamed whole: nothing half-written is seen.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_pipes: list[int] = []  # the wakeup pipe's read end while watch_signals is active
_received: list[int] = []  # the stop signals read from it


class Interrupted(Exception):
    """The sync was told to stop by a signal; ``exit_code`` is the shell's ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.exit_code = 128 + signum


def _raise(signum: int, _frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def watch_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise :class:`Interrupted`, mid-run once the run is over."""
    read_end, write_end = os.pipe()
    for end in (read_end, write_end):
        os.set_blocking(end, False)
    previous = {s: signal.signal(s, _raise) for s in STOP_SIGNALS}
    old_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _pipes.append(read_end)
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
        _pipes.clear()
        _received.clear()
        os.close(read_end)
        os.close(write_end)


def raise_if_signalled() -> None:
    """Raise :class:`Interrupted` if SIGINT or SIGTERM arrived while watching."""
    for read_end in _pipes:
        with contextlib.suppress(BlockingIOError):
            while data := os.read(read_end, 512):
                _received.extend(s for s in data if s in STOP_SIGNALS)
    if _received:
        raise Interrupted(_received[0])
