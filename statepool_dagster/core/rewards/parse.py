"""A curator's answer, as text, turned into ops; failure is a value with its reason.

The default parser accepts what curators write: a JSON list of ops, ``{"ops": [...]}``,
either one inside a fenced block or after free-text reasoning (the last well-formed
candidate wins), OpenAI-style tool calls (``{"name", "arguments"}``, arguments possibly a
JSON string, alone, in a list, under ``"tool_calls"`` or in ``<tool_call>`` tags).
Another parser is named by ``STATEPOOL_OPS_PARSER=module:function``: it takes the
text and returns a :class:`Parsed`, a list of ops, or ``None`` for "no answer found".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserCodeError, call_user

Op = dict[str, Any]
OpsParser = Callable[[str], "Parsed | list[Op] | None"]

_DECODER = json.JSONDecoder()
_STARTS = re.compile(r"[\[{]")
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OP_KEYS = ("op", "tool", "action")
_ARG_KEYS = ("params", "parameters", "arguments", "args")


@dataclass(frozen=True)
class Parsed:
    """The ops found in an answer, or ``ops is None`` and the reason none were."""

    ops: list[Op] | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.ops is not None

    @staticmethod
    def failed(reason: str) -> Parsed:
        return Parsed(None, reason)


def _arguments(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if value is None:
        return {}
    return value if isinstance(value, dict) else None


def _as_op(item: Any) -> Op | None:
    """One op in the ``{"op": name, **params}`` form, from any accepted shape."""
    if not isinstance(item, dict):
        return None
    if item.get("type") == "function" and isinstance(item.get("function"), dict):
        item = item["function"]
    name_key = next((k for k in _OP_KEYS if isinstance(item.get(k), str)), None)
    if name_key is None and isinstance(item.get("name"), str):
        name_key = "name"
    if name_key is None:
        return None
    params = {k: v for k, v in item.items() if k != name_key}
    nested = [k for k in _ARG_KEYS if k in params]
    if len(nested) == 1 and len(params) == 1:
        args = _arguments(params[nested[0]])
        if args is None:
            return None
        params = args
    elif name_key == "name" and not nested:
        return None  # a bare {"name": ...} is not a tool call
    return {"op": item[name_key], **params}


def ops_from_value(value: Any) -> list[Op] | None:
    """The ops a decoded JSON value holds, or ``None`` if it is not an answer."""
    if isinstance(value, dict):
        for key in ("ops", "operations", "tool_calls"):
            if isinstance(value.get(key), list):
                return ops_from_value(value[key])
        if "name" not in value and not isinstance(value.get("function"), dict):
            return None  # a lone {"op": ...} is more often a quoted example than an answer
        op = _as_op(value)
        return None if op is None else [op]
    if isinstance(value, list):
        ops = [_as_op(item) for item in value]
        if all(op is not None for op in ops):
            return ops  # type: ignore[return-value]
    return None


def _candidates(text: str) -> list[tuple[int, list[Op]]]:
    """``(end, ops)`` of each well-formed answer in ``text``, outermost values first."""
    found: list[tuple[int, list[Op]]] = []
    pos = 0
    while (match := _STARTS.search(text, pos)) is not None:
        start = match.start()
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            pos = start + 1
            continue
        ops = ops_from_value(value)
        if ops is None:
            pos = start + 1  # not an answer: one may still be nested in it
            continue
        found.append((end, ops))
        pos = end
    return found


def _tagged_tool_calls(text: str) -> tuple[int, list[Op]] | None:
    """All ``<tool_call>`` blocks as one answer (each block holds one call)."""
    ops: list[Op] = []
    end = -1
    for match in _TOOL_CALL_TAG.finditer(text):
        found = _candidates(match.group(1))
        if len(found) != 1:
            return None
        ops.extend(found[0][1])
        end = match.end()
    return (end, ops) if ops else None


def parse_ops(text: Any) -> Parsed:
    """The default parser: the last well-formed list of ops in ``text``."""
    if not isinstance(text, str):
        return Parsed.failed(f"the answer is a {type(text).__name__}, not text")
    if not text.strip():
        return Parsed.failed("empty answer")
    candidates = _candidates(text)
    tagged = _tagged_tool_calls(text)
    if tagged is not None:
        candidates.append(tagged)
    if not candidates:
        return Parsed.failed("no JSON list of operations found")
    return Parsed(max(candidates, key=lambda c: c[0])[1])


def run_parser(parser: OpsParser, text: Any) -> Parsed:
    """``parser(text)`` as a :class:`Parsed`, whatever the parser returns or raises."""
    try:
        result = call_user(parser, text)
    except UserCodeError as error:  # a swapped-in parser must not stop a training step
        return Parsed.failed(f"the ops parser raised {error}")
    if isinstance(result, Parsed):
        return result
    if result is None:
        return Parsed.failed("the ops parser found no answer")
    if isinstance(result, list) and all(isinstance(op, dict) for op in result):
        return Parsed(list(result))
    return Parsed.failed(f"the ops parser returned a {type(result).__name__}, not a list of ops")
