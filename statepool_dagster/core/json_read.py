"""Read JSON exactly as Python's ``json`` reads it (the original script's reader), fast.

msgspec decodes the common case; whatever it refuses that Python's ``json`` accepts
(``NaN``, ``Infinity``, ``-Infinity``, ``1e999``, lone surrogate escapes) is read
again by ``json`` itself, so a record is never lost for a value the original keeps.
Both agree on everything else, including Python's limit of 4300 digits per integer.

One nesting limit, :data:`DEPTH_LIMIT`, is checked before any parser runs: both
parsers otherwise stop at Python's recursion limit, which moves with the depth of
the calling stack (the same line accepted in one process, refused in another).
"""

from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from typing import Any

import msgspec

DEPTH_LIMIT = 512  # arrays and objects nested inside each other; deeper is a reject
_decode = msgspec.json.Decoder().decode
_skip = msgspec.json.Decoder(msgspec.Raw).decode
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_INT_DIGITS = sys.get_int_max_str_digits() or 0
_DIGIT_RUNS = bytes.maketrans(b"0123456789", b"0000000000")


def nesting_depth(data: bytes) -> int:
    """How deep arrays and objects nest in ``data`` (strings skipped); cheap when shallow."""
    if data.count(b"[") + data.count(b"{") <= DEPTH_LIMIT:
        return min(data.count(b"[") + data.count(b"{"), DEPTH_LIMIT)
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def check_depth(data: bytes) -> None:
    """``ValueError`` when ``data`` nests deeper than :data:`DEPTH_LIMIT`."""
    depth = nesting_depth(data)
    if depth > DEPTH_LIMIT:
        raise ValueError(f"nested {depth} levels deep (the limit is {DEPTH_LIMIT})")


def long_digit_run(data: bytes) -> bool:
    """Whether ``data`` holds more digits in a row than Python turns into an integer."""
    if not _INT_DIGITS or len(data) <= _INT_DIGITS:
        return False
    return b"0" * (_INT_DIGITS + 1) in data.translate(_DIGIT_RUNS)


def python_loads(data: bytes) -> Any:
    """``json.loads`` on the UTF-8 text, its errors as ``ValueError`` with a plain message."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except ValueError as exc:  # an integer longer than Python's digit limit
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"not valid JSON: nested too deeply (limit {DEPTH_LIMIT})") from None


def loads(data: bytes) -> Any:
    """What ``json.loads`` returns for ``data``; ``ValueError`` names what is wrong."""
    check_depth(data)
    try:
        return _decode(data)
    except msgspec.MsgspecError:
        return python_loads(data)  # the authority, and its own message when it refuses too
    except RecursionError:
        raise ValueError(f"not valid JSON: nested too deeply (limit {DEPTH_LIMIT})") from None


def number_array_valid(raw: bytes) -> bool:
    """Whether ``raw``, text of a JSON array of numbers only, is one ``json`` reads.

    Checked by msgspec without building a float; ``NaN`` and the infinities, which
    only Python's ``json`` knows, stand in as ``[]`` (so ``1NaN`` or ``-NaN`` stay invalid).
    """
    if long_digit_run(raw):
        return False
    for token in (b"-Infinity", b"Infinity", b"NaN"):
        raw = raw.replace(token, b"[]")  # a token of its own: `1NaN`, `-NaN` stay invalid
    try:
        _skip(raw)
    except (msgspec.MsgspecError, RecursionError):
        return False
    return True
