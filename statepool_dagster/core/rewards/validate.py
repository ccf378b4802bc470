"""Parsed ops checked against a state's library: every violation named.

Ops are checked in a canonical order (sorted by their JSON text), so which duplicate or
which op past the budget is the invalid one never depends on the order the curator
wrote them in: a score is a function of the set of ops.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .parse import Op
from .vocabulary import TEXT_FIELDS, OpSpec, Vocabulary


@dataclass(frozen=True)
class Violation:
    """One invalid op and why."""

    op: Any
    reason: str

    def describe(self) -> str:
        name = self.op.get("op") if isinstance(self.op, dict) else None
        return f"{name or 'op'}: {self.reason}"


@dataclass
class Checked:
    """The valid ops, in canonical order, and the violations."""

    valid: list[Op] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.valid) + len(self.violations)


def canonical(ops: Iterable[Any]) -> list[Any]:
    """``ops`` sorted by their JSON text (keys sorted): the same list for any order."""

    def key(op: Any) -> str:
        try:
            return json.dumps(op, sort_keys=True, ensure_ascii=False, default=repr)
        except (TypeError, ValueError):  # keys of mixed types
            return repr(op)

    return sorted(ops, key=key)


def card_ids(library: dict[str, Any]) -> set[str]:
    """The library's card ids, as text (a model may write ``3`` for the id ``"3"``)."""
    cards = library.get("cards") if isinstance(library, dict) else None
    return {str(c.get("card_id")) for c in cards or () if isinstance(c, dict)}


def referenced_cards(op: Op, spec: OpSpec) -> list[str]:
    """The existing cards an op names (``card_id`` / ``card_ids``; an addition names none)."""
    refs: list[str] = []
    if spec.effect == "add":
        return refs
    for param in spec.params:
        value = op.get(param.name)
        if param.card_ref == "one" and value is not None:
            refs.append(str(value))
        elif param.card_ref == "many" and isinstance(value, list):
            refs.extend(str(v) for v in value)
    return refs


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _problem(op: Op, spec: OpSpec, existing: set[str] | None) -> str | None:
    for param in spec.params:
        value = op.get(param.name)
        if value is None or (isinstance(value, str) and not value.strip()):
            if param.required:
                return f"required parameter {param.name!r} missing"
            continue
        if not param.accepts(value):
            return f"parameter {param.name!r} is not a {param.type}"
    if spec.effect == "update" and not any(_text(op.get(f)) for f in TEXT_FIELDS):
        return "changes nothing (no trigger or program)"
    refs = referenced_cards(op, spec)
    if spec.effect == "merge" and len(set(refs)) < 2:
        return "a merge needs at least two distinct cards"
    if existing is not None:
        missing = [r for r in refs if r not in existing]
        if missing:
            return f"no card {', '.join(missing)} in the library"
    return None


def validate_ops(
    ops: list[Any], library: dict[str, Any] | None, vocabulary: Vocabulary, max_ops: int
) -> Checked:
    """Check ``ops`` against ``library`` (``None``: card ids cannot be checked)."""
    existing = None if library is None else card_ids(library)
    checked = Checked()
    touched: set[str] = set()
    for op in canonical(ops):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            checked.violations.append(Violation(op, "not an operation with a name"))
            continue
        spec = vocabulary.ops.get(op["op"])
        if spec is None:
            reason = f"unknown op {op['op']!r} (known: {vocabulary.names()})"
            checked.violations.append(Violation(op, reason))
            continue
        problem = _problem(op, spec, existing)
        refs = set(referenced_cards(op, spec))
        if problem is None and not spec.allow_same_card and refs & touched:
            problem = f"card {', '.join(sorted(refs & touched))} already changed by another op"
        if problem is None and len(checked.valid) >= max_ops:
            problem = f"over the budget of {max_ops} operations"
        if problem is not None:
            checked.violations.append(Violation(op, problem))
            continue
        touched |= refs
        checked.valid.append(op)
    return checked
