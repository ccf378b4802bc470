"""What identifies a state for de-duplication: a 16-byte digest of its library and its batch.

The states stage records it with each state it builds (the ``digest`` fact of its part), so
the export and the live pool de-duplicate without reading a state's text to learn it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import msgspec


def state_digest(state: dict[str, Any]) -> bytes:
    """Identity of a state for de-duplication, 16 bytes: its library and its batch."""
    canonical = json.dumps(
        [state.get("lib_snapshot"), state.get("episodes")],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).digest()


# Floats Python writes in exponent form (1e-05, 1e+16) where msgspec would write them
# another way (0.00001, 1e16): a state holding one is digested by ``json``.
_FIXED = (1e-4, 1e16)


class _Floats(threading.local):
    """A decoder per thread that notes the floats ``json`` would write in exponent form."""

    def __init__(self) -> None:
        self.odd = False
        self.decoder = msgspec.json.Decoder(float_hook=self.number)

    def number(self, literal: str) -> float:
        value = float(literal)
        if value and not _FIXED[0] <= abs(value) < _FIXED[1]:
            self.odd = True
        return value


_FLOATS = _Floats()


def state_text_digest(text: str | bytes | memoryview) -> bytes:
    """:func:`state_digest` of a state's JSON text: the same 16 bytes, parsed and written
    by msgspec (faster), by ``json`` wherever the two could write it
    differently (a float in exponent form, a NaN, a lone surrogate, not an object).
    ``text`` may be a view of UTF-8 where Arrow holds it."""
    floats = _FLOATS
    floats.odd = False
    try:
        state = floats.decoder.decode(text)
        canonical = msgspec.json.encode(
            [state.get("lib_snapshot"), state.get("episodes")], order="sorted"
        )
    except (msgspec.MsgspecError, AttributeError, TypeError, ValueError):
        canonical = None
    if canonical is None or floats.odd:
        return state_digest(json.loads(bytes(text) if isinstance(text, memoryview) else text))
    return hashlib.blake2b(canonical, digest_size=16).digest()


def decode_noting_floats(text: str | bytes | memoryview) -> tuple[Any, bool]:
    """``text`` decoded as :func:`~.models.decode_stored` decodes it, and whether
    :func:`pieces_digest` may digest it: read by msgspec, holding no float ``json`` would
    write in exponent form."""
    floats = _FLOATS
    floats.odd = False
    try:
        value = floats.decoder.decode(text)
    except msgspec.MsgspecError:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text), False
    return value, not floats.odd


def pieces_digest(library: Any, episodes: list[Any]) -> bytes | None:
    """:func:`state_text_digest` of a state holding ``library`` and ``episodes``, each read by
    :func:`decode_noting_floats` as fit to digest: the state's text is never decoded again.
    ``None`` where msgspec cannot write them (the caller digests the text)."""
    try:
        canonical = msgspec.json.encode([library, episodes], order="sorted")
    except (msgspec.MsgspecError, TypeError, ValueError):
        return None
    return hashlib.blake2b(canonical, digest_size=16).digest()


def state_digest_hex(info: dict[str, Any], text: str | bytes | memoryview | None = None) -> str:
    """The digest a state part's facts record; from ``text`` where they do not (a store
    written before they did). ``None`` when neither is there."""
    recorded = info.get("digest")
    if isinstance(recorded, str):
        return recorded
    return None if text is None else state_text_digest(text).hex()
