"""What the live pool does when the store cannot be read: keep serving what it can, say so once.

A refresh that cannot list the store changes nothing and logs once until the store is
back. A row read from an object store waits at most the pool's ``read_deadline``. Once a
read failed or ran out of time, or a refresh could not reach the store, the store counts
as down: rows from it are not asked for at all (a call fails at once with
:class:`PoolUnavailable`, or with ``stand_ins`` serves another state's row that says so in
``stand_in_for``), and a probe on a thread of its own asks every :data:`PROBE_SECONDS`
whether it is back; the first refresh or read after it answers ends the outage. Rows held
elsewhere (a sealed segment in a local sessions folder) are read as usual.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import TypeVar

from ..core import storage_errors
from ..core.export import ExportRow

LISTING_SHARE = 10  # an object store's tables are listed for at most 1/10 of the time
BACKOFF_SECONDS = 30.0  # the longest wait between tries while the store cannot be read
READ_DEADLINE = 2.0  # the default longest wait for one call's rows from an object store
PROBE_SECONDS = 1.0  # while the store is down, it is asked whether it is back this often
MAX_PROBES = 16  # probes left waiting on a silent endpoint at once, at most
QUICK_SECONDS = 0.2  # a read not done by then: is the endpoint refusing connections?

T = TypeVar("T")


class PoolUnavailable(OSError):
    """A served state's row cannot be read now (the store unreachable, or no answer within
    the pool's ``read_deadline``) and the pool was not asked to serve a stand-in."""


class NoAnswer(TimeoutError):
    """The store did not answer within the pool's deadline."""


def at_once(read: Callable[..., T], *args: object) -> T:
    """A fetch run as it is (a local disk, or no deadline asked for)."""
    return read(*args)


class Deadline:
    """Runs one network fetch on a worker thread and waits for it at most ``seconds``.

    A read still waiting on the network when the time is up is left to end on its own (its
    client's timeout ends it); the next read gets a new thread, and the caller a new reader,
    so nothing is shared with the one left behind; until the caller has done so
    (``tripped`` cleared), every fetch fails at once. A fetch not done after
    :data:`QUICK_SECONDS` while the endpoint refuses connections (``address``: its host and
    port, when known) ends then: a client's retries against a refusing endpoint take seconds.
    """

    def __init__(self, seconds: float, address: Callable[[], tuple[str, int] | None] = tuple):
        if not seconds > 0:
            raise ValueError(f"read_deadline {seconds!r}: a number of seconds above 0")
        self.seconds = seconds
        self.address = address
        self.tripped: str | None = None  # why a fetch ran out of time (then none waits)
        self._workers: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self, read: Callable[..., T], *args: object) -> T:
        if self.tripped is not None:  # one call waits the deadline once, not once a fetch
            raise NoAnswer(self.tripped)
        if self._workers is None:
            self._workers = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="statepool-live-read"
            )
        future = self._workers.submit(read, *args)
        quick = min(QUICK_SECONDS, self.seconds)
        try:
            return future.result(timeout=quick)
        except concurrent.futures.TimeoutError:
            pass
        why = "the endpoint refuses connections" if refused(self.address()) else None
        if why is None:
            try:
                return future.result(timeout=self.seconds - quick)
            except concurrent.futures.TimeoutError:
                why = f"no answer within the pool's read_deadline ({self.seconds:g} s)"
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._workers = None
        self.tripped = why
        raise NoAnswer(why)


def refused(address: tuple[str, int] | None) -> bool:
    """Whether ``address`` refuses a TCP connection now (unknown or slow to answer: no)."""
    if not address:
        return False
    try:
        socket.create_connection(address, timeout=QUICK_SECONDS).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def endpoint_address(path: object) -> tuple[str, int] | None:
    """The host and port an fsspec path's client talks to, where its client names one
    (s3fs's endpoint URL); ``None`` otherwise."""
    fs = getattr(path, "fs", None)
    url = (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
    if url is None and getattr(fs, "protocol", None) in ("s3", ("s3", "s3a")):
        url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class Probe:
    """Asks, on a thread of its own, whether the store is back; a probe that has not
    answered within ``stale`` seconds is left behind and another one asks."""

    def __init__(self, reachable: Callable[[], bool], stale: float):
        self.reachable, self.stale = reachable, stale
        self._box: list[bool] | None = None  # the asking probe's answer (empty: none yet)
        self._threads: list[threading.Thread] = []
        self._started = float("-inf")

    def back(self) -> bool:
        """Whether the last probe found the store back; starts one when none is asking."""
        box = self._box
        if box:
            self._box = None
            if box[0]:
                return True
        now = time.monotonic()
        asking = self._box is not None and now - self._started < self.stale
        self._threads = [t for t in self._threads if t.is_alive()]
        if len(self._threads) >= MAX_PROBES:  # stuck ones: wait for one to end
            return False
        if not asking and now - self._started >= PROBE_SECONDS:
            self._started, self._box = now, []
            thread = threading.Thread(target=self._ask, args=(self._box,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return False

    def _ask(self, box: list[bool]) -> None:
        try:
            box.append(bool(self.reachable()))
        except storage_errors():  # a probe only answers yes or no
            box.append(False)


class Unreadable:
    """Knows whether the store is down, logs each trouble once, finds stand-ins when asked.

    While the store is down, whether it is back is asked by a probe on a thread of its own
    (``reachable``, at most every :data:`PROBE_SECONDS`), never on the caller's thread.
    """

    def __init__(
        self,
        log: logging.Logger,
        stand_ins: bool = False,
        reachable: Callable[[], bool] = bool,
        stale: float = READ_DEADLINE,
    ):
        self.log = log
        self.stand_ins = stand_ins
        self.store_down: str | None = None
        self.rows_down: set[str] = set()
        self.last: ExportRow | None = None
        self.refresh_failed = False
        self._probe = Probe(reachable, stale)

    def store_problem(self, exc: BaseException) -> None:
        """The store could not be read (a listing, a row): down until a probe says not."""
        if self.store_down is None:
            self.log.warning(
                "live pool: the store cannot be read now (%s): serving what is indexed; "
                "catching up when it is back",
                exc,
            )
        self.store_down = str(exc) or type(exc).__name__

    def back(self) -> bool:
        """Whether a probe found the store readable again (never waits for one)."""
        return self._probe.back()

    def skip_store(self) -> bool:
        """Whether rows are not asked from the store now: it is down and no probe found it
        back (one found back ends the outage)."""
        if self.store_down is None:
            return False
        if self.back():
            self.store_back()
            return False
        return True

    def failed(self, log: logging.Logger) -> None:
        """A refresh met a file no reader expects: the traceback once, the served states as
        they were."""
        if not self.refresh_failed:
            log.exception("live pool: a refresh failed; serving what is indexed")
        self.refresh_failed = True

    def store_back(self) -> None:
        if self.store_down is not None:
            self.log.warning("live pool: the store is readable again")
        self.store_down = None

    def ok(self, sid: str, row: ExportRow) -> ExportRow:
        self.rows_down.discard(sid)
        self.last = row
        return row

    def instead(
        self, sid: str, exc: BaseException, readable: Callable[[], ExportRow | None]
    ) -> ExportRow:
        """What to answer for ``sid``, whose row cannot be read now: :class:`PoolUnavailable`,
        or with ``stand_ins`` another state's row, marked ``stand_in_for=sid``."""
        first = sid not in self.rows_down
        self.rows_down.add(sid)
        if not self.stand_ins:
            raise PoolUnavailable(f"live pool: state {sid} cannot be read now ({exc})") from exc
        if first:
            self.log.warning(
                "live pool: state %s cannot be read now (%s): another state's row, marked "
                "stand_in_for, is served in its place until it can",
                sid,
                exc,
            )
        row = self.last or readable()
        if row is None:
            raise PoolUnavailable(f"live pool: no state can be read now ({exc})") from exc
        return dataclasses.replace(row, stand_in_for=sid)


class StorePace:
    """When a refresh lists the store's tables again.

    On a local disk, at every refresh. On an object store a listing costs a request per
    1,000 objects: it is taken again once ``LISTING_SHARE`` times its own duration has
    passed (sealed segments, listed per session, are read at every refresh all the same).
    While an object store cannot be read, tries are spaced twice as far each time, up to
    ``BACKOFF_SECONDS``: a client's retries against a gone endpoint take seconds a call.
    """

    def __init__(self, local: bool, refresh_seconds: float):
        self.local = local
        self.base = max(refresh_seconds, 0.0)
        self.next_at = float("-inf")
        self.wait = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def listed(self, started: float, ended: float, troubled: bool) -> None:
        if troubled:
            self.troubled(ended)
            return
        self.wait = 0.0
        self.next_at = started if self.local else ended + LISTING_SHARE * (ended - started)

    def troubled(self, now: float) -> None:
        if self.local:  # a local failure is quick to find again
            self.next_at = now
            return
        self.wait = min(max(2 * self.wait, self.base, 1.0), BACKOFF_SECONDS)
        self.next_at = now + self.wait
