"""What the run's own curator did next: the card-level diff from a library to the next one.

The ops use the bundled tool specs' shape (``add_card`` / ``update_card`` /
``delete_card``), so they are directly an SFT target and a reward baseline. Only a
card's ``trigger`` and ``program`` count: usage counters and other meta never make
an op. Order is fixed: rewrites and deletions in the old library's card order,
then additions in the new library's order (the prompt's own order of preference).
"""

from __future__ import annotations

import json
from typing import Any

TEXT_FIELDS = ("trigger", "program")
OP_KINDS = {"add_card": "add", "update_card": "update", "delete_card": "delete"}
LAST_SNAPSHOT_NOTE = "last snapshot of the run: no later library"


CardIndex = dict[Any, dict[str, Any]]


def cards_by_id(library: dict[str, Any]) -> CardIndex:
    """Cards keyed by ``card_id``, in library order; a repeated id keeps its first card."""
    cards: dict[Any, dict[str, Any]] = {}
    for card in library.get("cards", []):
        card_id = card.get("card_id") if isinstance(card, dict) else None
        if isinstance(card_id, str | int):  # a card without a usable id makes no op
            cards.setdefault(card_id, card)
    return cards


def card_ops(library: dict[str, Any], next_library: dict[str, Any]) -> list[dict[str, Any]]:
    """The ops that turn ``library``'s cards into ``next_library``'s."""
    return index_ops(cards_by_id(library), cards_by_id(next_library))


def index_ops(old: CardIndex, new: CardIndex) -> list[dict[str, Any]]:
    """:func:`card_ops` of two libraries' :func:`cards_by_id` (a library in two consecutive
    states is indexed once)."""
    updates: list[dict[str, Any]] = []
    deletes: list[dict[str, Any]] = []
    for card_id, card in old.items():
        after = new.get(card_id)
        if after is None:
            deletes.append({"op": "delete_card", "card_id": card_id})
            continue
        changed = {f: after.get(f) for f in TEXT_FIELDS if after.get(f) != card.get(f)}
        if changed:
            updates.append({"op": "update_card", "card_id": card_id, **changed})
    adds = [
        {"op": "add_card", "card_id": card_id, **{f: card.get(f) for f in TEXT_FIELDS}}
        for card_id, card in new.items()
        if card_id not in old
    ]
    return updates + deletes + adds


def reference_ops(
    library: dict[str, Any],
    next_version: int | None,
    next_library: dict[str, Any] | None,
    indexes: tuple[CardIndex, CardIndex] | None = None,
) -> dict[str, Any]:
    """``{"next_version", "ops"}``; without a later library, empty ops and a ``note`` saying so.

    ``indexes``: the two libraries' :func:`cards_by_id`, where the caller keeps them.
    """
    if next_library is None or next_version is None:
        return {"next_version": None, "ops": [], "note": LAST_SNAPSHOT_NOTE}
    old, new = indexes or (cards_by_id(library), cards_by_id(next_library))
    return {"next_version": next_version, "ops": index_ops(old, new)}


def ops_json(ops: dict[str, Any]) -> str:
    """The text stored in the ``reference_ops`` columns."""
    return json.dumps(ops, ensure_ascii=False)


def op_counts(ops: dict[str, Any]) -> list[int]:
    """How many ops of each kind of :data:`OP_KINDS` (in its order) ``ops`` holds."""
    kinds = dict.fromkeys(OP_KINDS.values(), 0)
    for op in ops.get("ops") or []:
        kind = OP_KINDS.get(op.get("op") if isinstance(op, dict) else None)
        if kind:
            kinds[kind] += 1
    return list(kinds.values())
