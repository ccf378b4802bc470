"""The states the live pool serves, in the order it serves them, and each one's place in
its split of the export (the verl row's ``extra_info.index``).

States already served keep their order; new ones come after them (in the export's order
among themselves); a state no longer served leaves its place (those after it move up).
A state whose copy changes (a segment's state now read from the store, a rebuilt run's
new row) keeps its place; a changed row (its ``row_key``) is counted as a change.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable

from ..core.feedback import Decision
from .entries import Entry


class Served:
    """The served order (state ids), each served state's entry, and the split's order keys."""

    def __init__(self, split: str | None):
        self.split = split
        self.order: list[str] = []
        self.entries: dict[str, Entry] = {}
        self._keys: dict[str, list[tuple]] = {}  # split -> export order keys of its states
        self.changes = 0  # counts changes a trainer would see (states in or out, weights, rows)
        self.rekeyed: dict[str, int] = {}  # a state whose row changed -> ``changes`` then

    def __len__(self) -> int:
        return len(self.order)

    def at(self, i: int) -> Entry:
        return self.entries[self.order[i]]

    def index(self, entry: Entry) -> int:
        """The entry's position in its split of the export as it stands."""
        return bisect_left(self._keys[entry.split], entry.key)

    def update(
        self,
        won: set[str],
        lost: set[str],
        winners: dict[str, Entry],
        decide: Callable[[str], Decision],
    ) -> None:
        """Serve the states that won (and that ``decide`` keeps), stop serving those that lost."""
        gone = {sid for sid in lost if sid in self.entries}
        for sid in gone:
            self._drop_key(self.entries.pop(sid))
        new: list[Entry] = []
        for sid in won:
            entry = winners[sid]
            decision = decide(sid)
            if not decision.keep or (self.split is not None and entry.split != self.split):
                if sid in self.entries:
                    self._drop_key(self.entries.pop(sid))
                    gone.add(sid)
                continue
            old = self.entries.get(sid)
            if old is not None and old.weight != decision.weight:
                self.changes += 1
            entry.weight = decision.weight
            if old is None:
                new.append(entry)
            elif old is not entry:  # the same state from another copy: same place
                if old.row_key != entry.row_key:  # a rebuilt run's new row
                    self.changes += 1
                    self.rekeyed[sid] = self.changes
                self._drop_key(old)
                insort(self._keys.setdefault(entry.split, []), entry.key)
                self.entries[sid] = entry
        if gone:
            for sid in gone:
                self.rekeyed.pop(sid, None)
            self.order = [s for s in self.order if s not in gone]
            self.changes += 1
        new.sort(key=lambda e: e.key)
        for entry in new:
            self.order.append(entry.sid)
            self.entries[entry.sid] = entry
        for split in {e.split for e in new}:
            keys = self._keys.setdefault(split, [])
            mine = [e.key for e in new if e.split == split]
            if len(mine) > 64:  # many at once (an open): one sort, not an insertion each
                keys += mine
                keys.sort()
            else:
                for key in mine:
                    insort(keys, key)
        self.changes += len(new)

    def _drop_key(self, entry: Entry) -> None:
        keys = self._keys[entry.split]
        del keys[bisect_left(keys, entry.key)]

    def reorder(self, first: list[str]) -> None:
        """Serve the states of ``first`` that are served now in its order, before the others
        (which keep theirs): the order a pool version recorded, taken up again."""
        ahead = [sid for sid in first if sid in self.entries]
        taken = set(ahead)
        self.order = ahead + [sid for sid in self.order if sid not in taken]
        self.changes += 1
