"""Read JSON exactly as Python's ``json`` reads it (the original script's reader), fast.

msgspec decodes the common case; whatever it refuses that Python's ``json`` accepts
(``NaN``, ``Infinity``, ``-Infinity``, ``1e999``, lone surrogate escapes) is read
again by ``json`` itself, so a record is never lost for a value the original keeps.
Both agree on everything else, including Python's limit of 4300 digits per integer.

One nesting limit, :data:`DEPTH_LIMIT`, is checked before any parser runs: both
parsers otherwise stop at Python's recursion limit, which moves with the depth of
the calling stack (the same line accepted in one process, refused in another).

:func:`blank_embeddings` blanks ``"_trigger_emb": [...]`` in a snapshot's bytes before any
parsing: the arrays are nearly all of a snapshot's bytes, and ``bytes.find`` plus
``bytes.translate`` pass over them at memory speed, so the parser sees only the small rest.
Each array becomes ``[]`` (the key stays, so the caller can check every blanked member was a
card's own, and the text nests as deep as the file); each must be JSON Python's ``json``
reads (``[1,,2]``, ``[+1]``, ``[01]``, ``[nan]`` are not), checked without building a float,
and each distinct array once (a card keeps its embedding until its trigger changes). Only
the literal spelling as a whole key is blanked; anything unusual returns ``None``.

What was read must be storable as UTF-8: :func:`is_utf8` for bytes, :func:`storable` for
text (Python's ``json`` reads a lone surrogate escape, ``"\\ud800"``, which UTF-8 cannot hold).
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from typing import Any

import msgspec

# The range of the tables' integer columns (Arrow int64): versions outside it are refused.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Arrays and objects nested inside each other; deeper is a reject. Under the original's
# own limit: run as a script on CPython 3.11 it dies of RecursionError writing a state whose
# episode line nests 497 deep (a library: 498), leaving an empty file, so nothing kept here
# is a state it cannot write; the margin is for a caller's deeper stack.
DEPTH_LIMIT = 480
_decode = msgspec.json.Decoder().decode
_skip = msgspec.json.Decoder(msgspec.Raw).decode
_QUOTE = ord('"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
# Python's limit on an integer's digits (``int()``, so its json too); 0 is no limit.
INT_DIGITS_LIMIT = sys.get_int_max_str_digits()
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_UTF8_CHUNK = 1 << 20  # is_utf8 never holds more than this much decoded text


def nesting_depth(data: bytes) -> int:
    """How deep arrays and objects nest in ``data`` (strings skipped); when shallow, a bound.

    Cheap: escaped pairs are dropped, then only brackets and quotes are kept (an
    embedding-heavy file keeps a few per card) and walked.
    """
    openers = data.count(b"[") + data.count(b"{")
    if openers <= DEPTH_LIMIT:
        return openers
    if b"\\" in data:  # escaped quotes and backslashes out first, so quotes pair up
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = data.translate(None, _NOT_STRUCTURE)
    depth = deepest = 0
    in_string = False
    for byte in kept:
        if byte == _QUOTE:
            in_string = not in_string
        elif not in_string:
            depth += _STEP[byte]
            deepest = max(deepest, depth)
    return deepest


def check_depth(data: bytes) -> None:
    """``ValueError`` when ``data`` nests deeper than :data:`DEPTH_LIMIT`."""
    depth = nesting_depth(data)
    if depth > DEPTH_LIMIT:
        raise ValueError(f"nested {depth} levels deep (the limit is {DEPTH_LIMIT})")


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` decodes as UTF-8 (what the original's text-mode ``open()`` needs).

    Checked :data:`_UTF8_CHUNK` bytes at a time, never building the whole text.
    """
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(view), _UTF8_CHUNK):
            decoder.decode(view[start : start + _UTF8_CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


_SLICE = 1 << 20  # characters encoded at a time: a huge text is never copied whole


def storable(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8: no lone surrogate (``\\ud800`` read alone).

    Encoding is faster than searching for one; each character encodes on its own, so
    slices tell the same.
    """
    if text.isascii():
        return True
    try:
        for start in range(0, len(text), _SLICE):
            text[start : start + _SLICE].encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_form(text: str) -> str | bytes | None:
    """``text`` as it is best stored, if :func:`storable`: an ASCII or huge text as it is,
    any other as its UTF-8 (encoded once, for both the check and the store); ``None``
    where it holds a lone surrogate."""
    if text.isascii() or len(text) > _SLICE:
        return text if storable(text) else None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def has_long_digit_run(data: bytes) -> bool:
    """Whether ``data`` holds more digits in a row than Python's integer limit.

    Such a run is an integer ``json`` refuses, or (harmless) part of a string or a
    fraction: a reader that skips values unbuilt sends such a text to ``json`` itself.
    """
    if not INT_DIGITS_LIMIT or len(data) <= INT_DIGITS_LIMIT:
        return False
    return b"0" * (INT_DIGITS_LIMIT + 1) in data.translate(_DIGITS_AS_ZERO)


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
    A run of digits past Python's integer limit is not valid here (``json`` decides).
    """
    if has_long_digit_run(raw):
        return False
    if b"N" in raw or b"I" in raw:
        for token in (b"-Infinity", b"Infinity", b"NaN"):
            raw = raw.replace(token, b"[]")  # a token of its own: `1NaN`, `-NaN` stay invalid
    try:
        _skip(raw)
    except (msgspec.MsgspecError, RecursionError):
        return False
    return True


EMBEDDING_KEY = "_trigger_emb"  # a card's embedding: stripped from every state
KEY = f'"{EMBEDDING_KEY}"'.encode()  # the key as it is spelled in a snapshot's bytes
_WS = b" \t\r\n"


# Digits and JSON number syntax, plus NaN / Infinity, which Python's json accepts.
_NUMBER_CHARS = b"0123456789eE+-.,NaInfity" + _WS


class _Checked:
    """Arrays already found valid, up to a byte budget (then forgotten and found again)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.arrays: set[bytes] = set()
        self.size = 0

    def valid(self, array: bytes) -> bool:
        """Whether ``array`` (``[`` … ``]``) is a flat array of numbers Python's json reads."""
        if array in self.arrays:
            return True
        if array[1:-1].translate(None, _NUMBER_CHARS) or not number_array_valid(array):
            return False
        if self.size + len(array) > self.budget:
            self.arrays.clear()
            self.size = 0
        self.arrays.add(array)
        self.size += len(array)
        return True


_CHECKED = _Checked(budget=32 << 20)


def _escaped(data: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    i = quote
    while i > 0 and data[i - 1] == 0x5C:
        i -= 1
    return (quote - i) % 2 == 1


# The key, then (each optional, so a miss says where) the colon and the array's bracket,
# whitespace between: found in one search, not byte by byte in Python.
_MEMBER = re.compile(re.escape(KEY) + rb"(?:[ \t\r\n]*(:)[ \t\r\n]*(\[)?)?")


def blank_embeddings(data: bytes) -> tuple[bytes, int] | None:
    """``(data with each embedding array replaced by [], how many)``, or ``None`` to fall back."""
    parts: list[bytes] = []
    search = copied = 0
    count = 0
    while True:
        found = _MEMBER.search(data, search)
        if found is None:
            break
        start = found.start()
        search = start + len(KEY)
        if found.start(1) < 0 or (data[start - 1] == 0x5C and _escaped(data, start)):
            continue  # the text ends a longer key, or sits inside a string
        bracket = found.start(2)
        if bracket < 0:
            return None
        close = data.find(b"]", bracket)
        if close < 0 or not _CHECKED.valid(data[bracket : close + 1]):
            return None  # not a flat array of numbers Python's json reads: the exact path names it
        parts.append(data[copied:bracket])
        parts.append(b"[]")
        search = copied = close + 1
        count += 1
    parts.append(data[copied:])
    return b"".join(parts), count
