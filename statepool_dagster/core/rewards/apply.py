"""Valid ops applied to a library: a pure function returning the next library.

``add`` appends a card with zeroed counters; its id is the op's own ``card_id`` when it
names a free one (reference ops do), else the next in the library's numbering
(``c0011`` after ``c0010``), never an id the library had. ``update`` replaces the texts it
names and keeps everything else (counters too). ``delete`` removes the card. ``merge``
keeps the first named card, with the op's texts, and removes the others. An op with no
known effect changes nothing. Apply only ops :func:`validate_ops` let through.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from .parse import Op
from .validate import referenced_cards
from .vocabulary import TEXT_FIELDS, Vocabulary

_NUMBERED = re.compile(r"(.*?)(\d+)")
NEW_CARD_META = {"injected": 0, "fired": 0, "helped": 0, "harmful": 0}


class _Ids:
    """Next free card ids in the library's own numbering, never reusing one it had."""

    def __init__(self, cards: list[dict[str, Any]]):
        self.used = {str(c.get("card_id")) for c in cards}
        self.prefix, self.width, self.number, self.ints = "c", 4, -1, bool(cards)
        for card in cards:
            card_id = card.get("card_id")
            self.ints &= isinstance(card_id, int) and not isinstance(card_id, bool)
            match = _NUMBERED.fullmatch(str(card_id))
            if match and int(match.group(2)) > self.number:
                self.prefix, self.number = match.group(1), int(match.group(2))
                self.width = len(match.group(2))

    def take(self, wanted: Any) -> str | int:
        free = isinstance(wanted, str | int) and not isinstance(wanted, bool)
        if free and str(wanted) not in self.used:
            self.used.add(str(wanted))
            return wanted
        while True:
            self.number += 1
            new: str | int = (
                self.number if self.ints else f"{self.prefix}{self.number:0{self.width}d}"
            )
            if str(new) not in self.used:
                self.used.add(str(new))
                return new


def _texts(op: Op) -> dict[str, str]:
    return {f: op[f] for f in TEXT_FIELDS if isinstance(op.get(f), str) and op[f].strip()}


def apply_ops(library: dict[str, Any], ops: list[Op], vocabulary: Vocabulary) -> dict[str, Any]:
    """The library after ``ops``; ``library`` itself is left as it was."""
    result = copy.deepcopy(library) if isinstance(library, dict) else {}
    cards: list[dict[str, Any]] = [c for c in result.get("cards") or () if isinstance(c, dict)]
    ids = _Ids(cards)
    for op in ops:
        spec = vocabulary.ops.get(op.get("op"))
        if spec is None or spec.effect is None:
            continue
        refs = referenced_cards(op, spec)
        if spec.effect == "add":
            card = {"card_id": ids.take(op.get("card_id")), "trigger": "", "program": ""}
            card.update(_texts(op))
            card["meta_info"] = dict(NEW_CARD_META)
            cards.append(card)
        elif spec.effect == "update":
            for card in cards:
                if refs and str(card.get("card_id")) == refs[0]:
                    card.update(_texts(op))
        elif spec.effect == "delete":
            cards = [c for c in cards if str(c.get("card_id")) not in refs]
        elif spec.effect == "merge" and refs:
            keep, drop = refs[0], set(refs[1:]) - {refs[0]}
            cards = [c for c in cards if str(c.get("card_id")) not in drop]
            for card in cards:
                if str(card.get("card_id")) == keep:
                    card.update(_texts(op))
    result["cards"] = cards
    version = result.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        result["version"] = version + 1
    return result
