"""The serving process's own memory, sampled from ``/proc/self/status`` while it works.

RssAnon is the process's anonymous memory (its heap: what it holds); pages of files it
maps or reads belong to the page cache, which the kernel reclaims. VmHWM is the peak
resident set (anonymous and file pages), for reference.
"""

from __future__ import annotations

import threading
import time

FIELDS = ("RssAnon", "VmRSS", "VmHWM")


def status_mb() -> dict[str, float]:
    """RssAnon, VmRSS and VmHWM now, in MB."""
    found: dict[str, float] = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in FIELDS:
                found[key] = int(value.split()[0]) / 1024  # kB
    return found


class Sampler:
    """A thread keeping the largest RssAnon seen, overall and in the phase now running."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak = 0.0
        self.phases: dict[str, float] = {}
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def begin(self, phase: str) -> None:
        self.sample()
        self.phase = phase

    def sample(self) -> float:
        anon = status_mb()["RssAnon"]
        self.peak = max(self.peak, anon)
        self.phases[self.phase] = max(self.phases.get(self.phase, 0.0), anon)
        return anon

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def report(self) -> dict[str, object]:
        now = status_mb()
        return {
            "rss_anon_peak_mb": round(self.peak, 1),
            "rss_anon_peak_by_phase_mb": {k: round(v, 1) for k, v in self.phases.items()},
            "vm_hwm_mb": round(now["VmHWM"], 1),
        }
