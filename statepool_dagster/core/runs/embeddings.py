"""Blank out ``"_trigger_emb": [...]`` in a snapshot's bytes before any JSON parsing.

Embedding arrays are nearly all of a snapshot's bytes. Finding them with
``bytes.find`` and checking their characters with ``bytes.translate`` runs at
memory speed, so the parser only ever sees the small rest. Each array becomes
``[]``: the key stays, so the caller can check that every blanked member was a
card's own (and fall back to the exact path otherwise), and the text nests exactly
as deep as the file (the arrays hold numbers only), so the depth limit is checked on
it. Anything unusual (a non-numeric array, odd syntax) makes :func:`blank_embeddings`
return ``None``.

Only the literal spelling is blanked, and only where it is a whole key: text that
merely ends in it (``"a\\"_trigger_emb"``, an escaped quote before it) is left alone.
Each blanked array must be JSON that Python's ``json`` reads (``[1,,2]``, ``[+1]``,
``[01]``, ``[nan]`` are not), checked without building a float. A card keeps its
embedding from version to version until its trigger changes, so each distinct array
is checked once (:class:`_Checked`), not once per snapshot.
"""

from __future__ import annotations

import re

from .json_read import number_array_valid

KEY = b'"_trigger_emb"'
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
_MEMBER = re.compile(rb'"_trigger_emb"(?:[ \t\r\n]*(:)[ \t\r\n]*(\[)?)?')


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
