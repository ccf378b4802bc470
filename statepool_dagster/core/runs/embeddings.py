"""Blank out ``"_trigger_emb": [...]`` in a snapshot's bytes before any JSON parsing.

Embedding arrays are nearly all of a snapshot's bytes. Finding them with
``bytes.find`` and checking their characters with ``bytes.translate`` runs at
memory speed, so the parser only ever sees the small rest. Each array becomes
``0``: the key stays, so the caller can check that every blanked member was a
card's own (and fall back to the exact path otherwise). Anything unusual (a
non-numeric array, odd syntax) makes :func:`blank_embeddings` return ``None``.
"""

from __future__ import annotations

KEY = b'"_trigger_emb"'
_WS = b" \t\r\n"
# Digits and JSON number syntax, plus NaN / Infinity, which Python's json accepts.
_NUMBER_CHARS = b"0123456789eE+-.,NaInfity" + _WS


def _skip_ws(data: bytes, i: int) -> int:
    n = len(data)
    while i < n and data[i] in _WS:
        i += 1
    return i


def blank_embeddings(data: bytes) -> tuple[bytes, int] | None:
    """``(data with each embedding array replaced by 0, how many)``, or ``None`` to fall back."""
    parts: list[bytes] = []
    pos = 0
    count = 0
    while True:
        start = data.find(KEY, pos)
        if start < 0:
            break
        colon = _skip_ws(data, start + len(KEY))
        if colon >= len(data) or data[colon] != ord(":"):
            pos = start + len(KEY)  # the text sits inside a string value
            continue
        bracket = _skip_ws(data, colon + 1)
        if bracket >= len(data) or data[bracket] != ord("["):
            return None
        close = data.find(b"]", bracket)
        if close < 0 or data[bracket + 1 : close].translate(None, _NUMBER_CHARS):
            return None  # not a flat array of numbers
        parts.append(data[pos:bracket])
        parts.append(b"0")
        pos = close + 1
        count += 1
    parts.append(data[pos:])
    return b"".join(parts), count
