"""A session line's provenance (``_statepool``: policy step, parent, time, meta), checked once.

``StateWriter`` checks what it is about to write and every reader of a sealed line (the
``session_states`` build, the live pool) checks what it read with the same function, so a
value the store's columns cannot hold is refused before it is written and, written by
another tool, is a reject naming its line, never a failed build.
"""

from __future__ import annotations

import json
from typing import Any

from ..ranges import check
from ..runs.json_read import storable

# The one key a session line adds to the state's own: who wrote it, when, at which step.
PROVENANCE_KEY = "_statepool"


def provenance_fields(value: Any) -> tuple[int | None, str | None, float | None, str | None]:
    """``(policy_step, parent_state_id, time, meta as JSON)``; ``ValueError`` naming the field."""
    if value is None:
        return None, None, None, None
    if not isinstance(value, dict):
        raise ValueError(f"{PROVENANCE_KEY} is not an object")
    step, parent, when, meta = (
        value.get(k) for k in ("policy_step", "parent_state_id", "time", "meta")
    )
    if step is not None:
        _checked("policy_step", step)
    if parent is not None:
        if not isinstance(parent, str):
            raise ValueError(f"{PROVENANCE_KEY}.parent_state_id is not a string")
        if not storable(parent):
            raise ValueError(f"{PROVENANCE_KEY}.parent_state_id: not storable as UTF-8")
    if when is not None:
        when = float(_checked("time", when))
    meta_text = None
    if meta is not None:
        try:
            meta_text = json.dumps(meta, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as exc:  # a key of mixed types, a value JSON lacks
            raise ValueError(f"{PROVENANCE_KEY}.meta: not JSON ({exc})") from None
        if not storable(meta_text):
            raise ValueError(f"{PROVENANCE_KEY}.meta: not storable as UTF-8")
    return step, parent, when, meta_text


def _checked(field: str, value: Any) -> Any:
    try:
        return check(field, value)
    except ValueError as exc:
        raise ValueError(f"{PROVENANCE_KEY}.{exc}") from None
