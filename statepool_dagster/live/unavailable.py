"""What the live pool does when the store cannot be read: keep serving, say so once.

A refresh that cannot list the store changes nothing and logs once until the store is
back. A row that cannot be read (the store or its endpoint gone, a file unreadable) is
replaced by a row that can: the last one read, else another served state's. Each state
is named once in the log while it stays unreadable; a trainer never sees an exception
unless no row at all has ever been readable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..core.export.rows import ExportRow


class PoolUnavailable(OSError):
    """No row of the pool can be read, and none was read before."""


class Unreadable:
    """Logs each trouble once and finds a row to serve instead."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.store_down: str | None = None
        self.rows_down: set[str] = set()
        self.last: ExportRow | None = None
        self.refresh_failed = False

    def store_problem(self, exc: BaseException) -> None:
        if self.store_down is None:
            self.log.warning(
                "live pool: the store cannot be read now (%s): serving what is indexed; "
                "catching up when it is back",
                exc,
            )
        self.store_down = str(exc)

    def failed(self, log: logging.Logger) -> None:
        """A refresh failed for another reason (a bug, a file no reader expects): the
        traceback once, the served states as they were."""
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

    def fallback(
        self, sid: str, exc: BaseException, readable: Callable[[], ExportRow | None]
    ) -> ExportRow:
        """A row to serve in place of ``sid``'s, which cannot be read now."""
        if sid not in self.rows_down:
            self.rows_down.add(sid)
            self.log.warning(
                "live pool: state %s cannot be read now (%s): another state is served in "
                "its place until it can",
                sid,
                exc,
            )
        row = self.last or readable()
        if row is None:
            raise PoolUnavailable(f"live pool: no state can be read now ({exc})")
        return row
