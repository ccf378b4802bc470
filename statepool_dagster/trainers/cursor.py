"""Which served state a stream draws next, and a cursor that lets a resumed trainer draw on.

:class:`DrawOrder` draws states never served first (in the pool's order, new ones as they
come), then round robin in the pool's order, or by weight. Its cursor (``state_dict``,
torchdata's ``Stateful`` protocol) is where it was after a given number of draws: the
pool version then (kept in the store, :mod:`..live.versions`), the states drawn by then (a
bitmap over that version's order), those queued and not drawn yet, the round-robin place
and how many random numbers the weighted draw had taken. A stream opened again on that
version with that cursor draws exactly what it would have drawn next; states that came
into the pool meanwhile are queued after those the cursor had not reached.

A cursor is JSON, about 1.2 bytes a state for the bitmap and 4 a queued state; it carries
a digest of itself and the store it belongs to, and is refused, in one line, when either
does not match.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from bisect import bisect_right
from collections import deque
from itertools import accumulate
from typing import Any

import numpy as np

from ..live import LivePool

CURSOR_FORMAT = 1
MARKS = 1 << 16  # draws remembered: how far a trainer's prefetch may run ahead of training


class CursorError(ValueError):
    """A cursor that cannot be taken up: damaged, of another store, of another format."""


class DrawOrder:
    """The next position to serve, and what it was after each recent draw."""

    def __init__(self, pool: LivePool, weighted: bool, seed: int):
        self.pool, self.weighted, self.seed = pool, weighted, seed
        self.rng = random.Random(seed)
        self.rng_calls = 0
        self.served: set[str] = set()
        self.queued: list[str] = []  # every state queued as never served, in order
        self.head = 0  # queued[head:] not drawn yet
        self.cursor = 0  # round robin: the next position
        self.last: str | None = None
        self.drawn = 0
        self.position: dict[str, int] = {}
        self.cumulative: list[float] = []
        # after draw n: (n, state drawn, its first draw?, head, cursor, last, rng calls)
        self.marks: deque[tuple] = deque(maxlen=MARKS)
        self.update()

    def update(self) -> None:
        """Take in a change of the pool: its new states (they come last), all of it when one
        left (positions shift), every weight when weighted."""
        self.synced = self.pool.changes
        ids = self.pool.state_ids()
        cut = len(ids)
        while cut and ids[cut - 1] not in self.position:
            cut -= 1
        if cut < len(self.position):  # a state left
            self.position = {sid: i for i, sid in enumerate(ids)}
            if self.last in self.position:  # round robin goes on after the last one served
                self.cursor = self.position[self.last] + 1
        else:
            self.position.update((ids[i], i) for i in range(cut, len(ids)))
        self.queued.extend(sid for sid in ids[cut:] if sid not in self.served)
        if self.weighted:
            weights = (self.pool.weight(i) for i in range(len(ids)))
            self.cumulative = list(accumulate(1.0 if w is None else max(w, 1e-6) for w in weights))

    def later(self, sid: str) -> None:
        """``sid`` could not be read when drawn: the draw is undone (the cursor counts rows
        served), and it is drawn again after the queued states."""
        if self.marks and self.marks[-1][1] == sid:
            self.marks.pop()
            self.drawn -= 1
        self.served.discard(sid)
        self.queued.append(sid)

    def next(self) -> int | None:
        """The next position to serve (``None``: the pool serves nothing now)."""
        if not self.position:
            return None
        while self.head < len(self.queued):
            sid = self.queued[self.head]
            self.head += 1
            if sid in self.position and sid not in self.served:
                return self._drawn(self.position[sid])
        if self.weighted:
            draw = self.rng.random() * self.cumulative[-1]
            self.rng_calls += 1
            return self._drawn(min(bisect_right(self.cumulative, draw), len(self.position) - 1))
        i = self.cursor % len(self.position)
        self.cursor = i + 1
        self.last = self.pool.state_id(i)
        return self._drawn(i)

    def _drawn(self, i: int) -> int:
        sid = self.pool.state_id(i)
        first = sid not in self.served
        self.served.add(sid)
        self.drawn += 1
        self.marks.append((self.drawn, sid, first, self.head, self.cursor, self.last,
                           self.rng_calls))  # fmt: skip
        return i

    # ------------------------------------------------------------------ the cursor

    def state_dict(self, drawn: int | None = None) -> dict[str, Any]:
        """The cursor after ``drawn`` draws (default: all so far), the served order kept as
        a pool version in the store."""
        drawn = self.drawn if drawn is None else drawn
        later = [m for m in self.marks if m[0] > drawn]
        at_draw = [m[3:] for m in self.marks if m[0] == drawn]
        if drawn == self.drawn:
            head, cursor, last, calls = self.head, self.cursor, self.last, self.rng_calls
        elif at_draw:
            head, cursor, last, calls = at_draw[0]
        elif drawn == 0 and self.marks and self.marks[0][0] == 1:
            head, cursor, last, calls = 0, 0, None, 0
        else:
            raise ValueError(f"draw {drawn}: not among the last {len(self.marks)} draws")
        served = self.served - {m[1] for m in later if m[2]}
        version = self.pool.version()
        size = len(self.pool)
        at = self.position  # the pool's order as last taken in (update())
        if self.synced != self.pool.changes or len(at) != size:
            at = {sid: i for i, sid in enumerate(self.pool.state_ids())}
        bits = np.zeros(size, dtype=bool)
        bits[[at[s] for s in served if s in at]] = True
        queued = np.array([at[s] for s in self.queued[head:] if s in at], dtype="<i4")
        body = {
            "format": CURSOR_FORMAT,
            "store": str(self.pool.store),
            "version": version,
            "seed": self.seed,
            "weighted": self.weighted,
            "drawn": drawn,
            "cursor": cursor,
            "last": at.get(last, -1),
            "rng_calls": calls,
            "served": base64.b64encode(np.packbits(bits).tobytes()).decode(),
            "queued": base64.b64encode(queued.tobytes()).decode(),
        }
        return {**body, "digest": cursor_digest(body)}

    @classmethod
    def resumed(cls, pool: LivePool, weighted: bool, seed: int, state: dict[str, Any]) -> DrawOrder:
        """The order a cursor describes, on ``pool`` opened ``as_of`` its version."""
        check_cursor(state, pool)
        if pool.as_of is None or pool.as_of.id != state["version"]:
            raise CursorError(f"the pool must be opened as_of={state['version']!r}")
        ids = pool.as_of.state_ids
        served = served_positions(state, len(ids))
        queued = np.frombuffer(base64.b64decode(state["queued"]), dtype="<i4")
        if len(queued) and queued.max() >= len(ids):
            raise CursorError("the cursor does not fit its pool version")
        order = cls.__new__(cls)
        order.pool, order.weighted, order.seed = pool, weighted, seed
        order.rng = random.Random(seed)
        order.rng_calls = state["rng_calls"]
        for _ in range(order.rng_calls):
            order.rng.random()
        order.served = {ids[i] for i in served}
        order.queued = [ids[i] for i in queued.tolist()]
        order.head = 0
        order.cursor = state["cursor"]
        order.last = None if state["last"] < 0 else ids[state["last"]]
        order.drawn = state["drawn"]
        order.marks = deque(maxlen=MARKS)
        order.position = {}
        known = {sid: i for i, sid in enumerate(pool.state_ids())}
        order.position = {sid: known[sid] for sid in ids if sid in known}
        if order.last in order.position:  # round robin goes on after the last one served
            order.cursor = order.position[order.last] + 1
        order.update()  # states that came in since: queued after the cursor's
        return order


def cursor_digest(body: dict[str, Any]) -> str:
    """The digest a cursor carries of the rest of itself."""
    return hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).hexdigest()


def check_cursor(state: Any, pool: LivePool | None = None) -> None:
    """Refuse, in one line, a cursor that is damaged or belongs to another store."""
    if not isinstance(state, dict) or state.get("format") != CURSOR_FORMAT:
        raise CursorError("not a statepool cursor (or one of another format)")
    if "version" not in state or "store" not in state:
        raise CursorError("not a statepool cursor (or one of another format)")
    body = {k: v for k, v in state.items() if k != "digest"}
    try:
        whole = state.get("digest") == cursor_digest(body)
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise CursorError("the cursor is damaged (its digest does not match)")
    if pool is not None and state["store"] != str(pool.store):
        raise CursorError(f"the cursor is of the store {state['store']}, not {pool.store}")


def served_positions(state: dict[str, Any], size: int) -> list[int]:
    """The positions, in its pool version's order (of ``size`` states), a cursor had served."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(state["served"]), dtype=np.uint8))
    if len(bits) < size:
        raise CursorError("the cursor does not fit its pool version")
    return np.flatnonzero(bits[:size]).tolist()


def pack_positions(positions: list[int]) -> str:
    """Positions in a version's order, as a cursor keeps them (4 bytes each, base64)."""
    return base64.b64encode(np.asarray(positions, dtype="<i4").tobytes()).decode()


def unpack_positions(text: str, size: int) -> list[int]:
    """:func:`pack_positions` read back; :class:`CursorError` for one past ``size``."""
    positions = np.frombuffer(base64.b64decode(text), dtype="<i4")
    if len(positions) and positions.max() >= size:
        raise CursorError("the cursor does not fit its pool version")
    return positions.tolist()
