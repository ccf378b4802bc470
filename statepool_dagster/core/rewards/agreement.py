"""How close an answer's edits come to the reference ops, card by card, in any order.

Both sides are compared as card-level diffs of the state's library (what
:func:`card_ops` computes for the run's own curator), so a merge, a custom op name or a
rewrite that changes nothing are judged by what they do to the cards. Rewrites and
deletions match per card and kind; a rewrite scores the sequence-similarity ratio of
the texts either side changed. Additions have no ids to match on: each reference
addition is paired with the most similar predicted one. The agreement is the sum of
the matches over the larger side's op count: missing and extra ops both lower it.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Any

from ..states.reference_ops import card_ops
from .parse import Op
from .validate import canonical
from .vocabulary import TEXT_FIELDS, Vocabulary, op_spec

MAX_COMPARED_CHARS = 4000  # SequenceMatcher is quadratic: longer texts are cut first


def similarity(a: Any, b: Any) -> float:
    """``difflib``'s ratio of two texts (1.0 when both are empty)."""
    a = a if isinstance(a, str) else ""
    b = b if isinstance(b, str) else ""
    if a == b:
        return 1.0
    return SequenceMatcher(None, a[:MAX_COMPARED_CHARS], b[:MAX_COMPARED_CHARS]).ratio()


def as_card_ops(ops: list[Op], vocabulary: Vocabulary) -> list[Op]:
    """Ops in the reference's kinds (``add_card``/``update_card``/``delete_card``), by effect.

    Used when there is no library to apply them to.
    """
    result: list[Op] = []
    for op in ops:
        spec = vocabulary.ops.get(op.get("op")) or op_spec(str(op.get("op")), {})
        texts = {f: op[f] for f in TEXT_FIELDS if f in op}
        ids = op.get("card_ids") if isinstance(op.get("card_ids"), list) else [op.get("card_id")]
        if spec.effect == "add":
            result.append({"op": "add_card", **texts})
        elif spec.effect == "update":
            result.append({"op": "update_card", "card_id": op.get("card_id"), **texts})
        elif spec.effect == "delete":
            result.append({"op": "delete_card", "card_id": op.get("card_id")})
        elif spec.effect == "merge" and ids:
            result.append({"op": "update_card", "card_id": ids[0], **texts})
            result.extend({"op": "delete_card", "card_id": i} for i in ids[1:])
    return result


def predicted_card_ops(
    library: dict[str, Any] | None,
    next_library: dict[str, Any] | None,
    valid: list[Op],
    vocabulary: Vocabulary,
) -> list[Op]:
    """The answer's edits as a card-level diff."""
    if library is None or next_library is None:
        return as_card_ops(valid, vocabulary)
    return card_ops(library, next_library)


def _kind(op: Op) -> str:
    return str(op.get("op", "")).split("_", 1)[0]


def _originals(library: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    cards = (library or {}).get("cards") or ()
    return {str(c.get("card_id")): c for c in cards if isinstance(c, dict)}


def _rewrite_similarity(pred: Op, ref: Op, original: dict[str, Any]) -> float:
    fields = [f for f in TEXT_FIELDS if f in pred or f in ref]
    if not fields:
        return 1.0
    total = sum(
        similarity(pred.get(f, original.get(f)), ref.get(f, original.get(f))) for f in fields
    )
    return total / len(fields)


def _add_similarity(pred: Op, ref: Op) -> float:
    return sum(similarity(pred.get(f), ref.get(f)) for f in TEXT_FIELDS) / len(TEXT_FIELDS)


def agreement(predicted: list[Op], reference: list[Op], library: dict[str, Any] | None) -> float:
    """In [0, 1]: 1.0 for the reference's own edits (and for ``[]`` against ``[]``)."""
    if not predicted and not reference:
        return 1.0
    originals = _originals(library)
    matched = 0.0
    by_card = {(_kind(op), str(op.get("card_id"))): op for op in predicted if _kind(op) != "add"}
    for ref in reference:
        kind = _kind(ref)
        if kind == "add":
            continue
        pred = by_card.get((kind, str(ref.get("card_id"))))
        if pred is None:
            continue
        original = originals.get(str(ref.get("card_id")), {})
        matched += 1.0 if kind == "delete" else _rewrite_similarity(pred, ref, original)
    ref_adds = [op for op in reference if _kind(op) == "add"]
    # a new card's id depends on the order it was added in: leave it out of the ordering
    pred_adds = canonical(
        {k: v for k, v in op.items() if k != "card_id"} for op in predicted if _kind(op) == "add"
    )
    pairs = sorted(
        (
            (-_add_similarity(p, r), ri, pi)
            for ri, r in enumerate(ref_adds)
            for pi, p in enumerate(pred_adds)
        ),
    )
    used_ref: set[int] = set()
    used_pred: set[int] = set()
    for neg_sim, ri, pi in pairs:
        if ri in used_ref or pi in used_pred:
            continue
        used_ref.add(ri)
        used_pred.add(pi)
        matched -= neg_sim
    return matched / max(len(predicted), len(reference))
