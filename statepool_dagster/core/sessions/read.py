"""Read a sealed segment: each line is a state (with its provenance) or a reject."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..names import parse_run_state_id, run_name_problem
from ..rejects import RAW_LIMIT, UNSTORABLE, Reject, escape_bytes
from ..runs.json_read import is_utf8, loads, storable
from ..segments.reader import DEFAULT_MAX_LINE, OversizeLine, iter_segment_lines
from ..states.models import STATE_FIELDS, CheckpointState
from .provenance import PROVENANCE_KEY, provenance_fields

_REQUIRED = ("state_id", "dataset", "lib_snapshot", "episodes", "analysis", "last_receipt")
_SLICE = 1 << 20  # characters encoded at a time into the digest


@dataclass
class SessionState:
    """One state read from a session line, its pool id and where it came from."""

    state_id: str
    written_id: str
    text: str  # the original's to_json, with the pool id as state_id
    state: CheckpointState
    line: int
    policy_step: int | None
    parent_state_id: str | None
    time: float | None
    meta: str | None


def pool_state_id(state: CheckpointState) -> str:
    """A run-path id (``<run>_ckpt<k>``) stays; any other state gets a digest of its content.

    The digest covers the canonical JSON of every field but ``state_id``, so one state
    written by two workers under two ids is one state.
    """
    parsed = parse_run_state_id(state.state_id)
    if parsed and run_name_problem(parsed[0]) is None:
        return state.state_id
    # The digest of json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",",
    # ":")), fed a field at a time and encoded a slice at a time: a huge field is not
    # copied into one text with the others, nor encoded whole.
    digest = hashlib.blake2b(digest_size=16)
    for n, key in enumerate(sorted(k for k in STATE_FIELDS if k != "state_id")):
        digest.update((("{" if n == 0 else ",") + json.dumps(key) + ":").encode("utf-8"))
        text = _canonical(getattr(state, key))
        for start in range(0, len(text), _SLICE):
            digest.update(text[start : start + _SLICE].encode("utf-8"))
    digest.update(b"}")
    return "s-" + digest.hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _validation_message(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "the state"
    return f"field {where}: {first['msg']}"


def parse_state_line(raw: bytes, line: int) -> SessionState:
    """The state a session line holds; ``ValueError`` saying why it is not one."""
    if not is_utf8(raw):
        raise ValueError("not storable as UTF-8: invalid UTF-8 bytes")
    record = loads(raw)
    if not isinstance(record, dict):
        raise ValueError(f"not a state: a JSON {type(record).__name__}, not an object")
    step, parent, when, meta = provenance_fields(record.pop(PROVENANCE_KEY, None))
    unknown = [k for k in record if k not in STATE_FIELDS]
    if unknown:
        fields = "field" if len(unknown) == 1 else "fields"
        raise ValueError(f"not a state: unknown {fields} {', '.join(map(repr, unknown[:5]))}")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        fields = "field" if len(missing) == 1 else "fields"
        raise ValueError(f"not a state: missing {fields} {', '.join(map(repr, missing))}")
    try:
        state = CheckpointState.model_validate(record, strict=True)
    except ValidationError as exc:
        raise ValueError(f"not a state: {_validation_message(exc)}") from None
    written = state.state_id
    if not storable(written):  # kept as written_state_id when the pool id is a digest
        raise ValueError(UNSTORABLE)
    try:
        state.state_id = pool_state_id(state)
    except UnicodeEncodeError:
        raise ValueError(UNSTORABLE) from None
    text = state.to_json()
    if not storable(text):
        raise ValueError(UNSTORABLE)
    return SessionState(state.state_id, written, text, state, line, step, parent, when, meta)


def read_segment(
    path: Any, display: str, max_line: int = DEFAULT_MAX_LINE
) -> Iterator[SessionState | Reject]:
    """Each line of a sealed segment as a state or a reject naming ``display`` and the line."""
    for number, raw in iter_segment_lines(path, max_line):
        item = parse_line(raw, number, display, max_line)
        del raw  # not held while the caller stores the state
        yield item


def parse_line(
    raw: bytes | OversizeLine, number: int, display: str, max_line: int = DEFAULT_MAX_LINE
) -> SessionState | Reject:
    """One line of a sealed segment (``display`` names it) as a state or a reject."""
    if isinstance(raw, OversizeLine):
        error = f"a line of {raw.length} bytes, over the limit of {max_line}"
        return Reject(file=display, line=number, error=error, raw=None)
    try:
        return parse_state_line(raw, number)
    except ValueError as exc:
        return Reject(file=display, line=number, error=str(exc), raw=escape_bytes(raw[:RAW_LIMIT]))
