"""The checkpoint state the curator sees, kept as the plain dicts its records were read as.

Unknown fields (researchers add them) and key order survive untouched; the pydantic model
gives typed access where logic needs it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
from pydantic import BaseModel, Field

_decode = msgspec.json.Decoder().decode
STATE_FIELDS = (
    "state_id",
    "dataset",
    "lib_snapshot",
    "episodes",
    "analysis",
    "last_receipt",
    "followup_qids",
    "gt_map",
)


class CheckpointState(BaseModel):
    """Everything the curator sees at one checkpoint; one GRPO group's question."""

    state_id: str
    dataset: str
    lib_snapshot: dict[str, Any]
    episodes: list[dict[str, Any]]
    analysis: dict[str, Any] | None
    last_receipt: str
    followup_qids: list[str] = Field(default_factory=list)
    gt_map: dict[str, Any] = Field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The seed's ``asdict`` form: its keys, in its order."""
        return {name: getattr(self, name) for name in STATE_FIELDS}

    def to_json(self) -> str:
        """The exact text the original script writes for this state."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @staticmethod
    def from_json(text: str | bytes) -> CheckpointState:
        """Read a state written by :meth:`to_json` or by the original script."""
        return CheckpointState(**json.loads(text))

    @staticmethod
    def trusted(text: str | bytes | memoryview) -> CheckpointState:
        """:meth:`from_json` for a text this package wrote itself: parsed fast, not validated."""
        return CheckpointState.model_construct(**decode_stored(text))


def decode_stored(text: str | bytes | memoryview) -> Any:
    """A JSON text this package stored (a state, a library, a record), read back fast.

    msgspec first; what it refuses (``NaN``, ``Infinity``, ``1e999``, which ``json.dumps``
    writes) is read by ``json`` itself.
    """
    try:
        return _decode(text)
    except msgspec.MsgspecError:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)


# What json.dumps makes anew at each call. A value decoded from JSON holds no cycle: the
# check for one (a dict of every container's id) is skipped, the text is the same.
_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)


def dumps(value: Any) -> str:
    """The original's JSON text for ``value`` (``json.dumps``, ``ensure_ascii=False``)."""
    return _ENCODER.encode(value)


BytesLike = bytes | bytearray | memoryview


def _utf8(text: str | BytesLike, errors: str) -> BytesLike:
    return text.encode("utf-8", errors) if isinstance(text, str) else text


def state_bytes(
    state_id: str,
    dataset: str,
    library_json: str | BytesLike,
    episode_jsons: Sequence[str | BytesLike],
    analysis: dict[str, Any] | None,
    last_receipt: str,
    followup_qids: list[str],
    gt_map: dict[str, Any],
    errors: str = "strict",
) -> bytes:
    """:meth:`CheckpointState.to_json` in UTF-8, from a library and episodes in :func:`dumps` form.

    Without indentation ``json.dumps`` writes a nested value exactly as it writes it
    alone, so the text is assembled from the stored parts (text, or its UTF-8 bytes as
    the store holds them) instead of decoding them and encoding the whole state again:
    one copy of the whole, however large a part. ``errors`` encodes the text parts.
    """
    small = [dumps(state_id), dumps(dataset), dumps(analysis), dumps(last_receipt)]
    state_id, dataset, analysis, last_receipt = (t.encode("utf-8", errors) for t in small)
    pieces: list[BytesLike] = [
        b'{"state_id": ',
        state_id,
        b', "dataset": ',
        dataset,
        b', "lib_snapshot": ',
        _utf8(library_json, errors),
        b', "episodes": [',
    ]
    for i, episode in enumerate(episode_jsons):
        pieces += [b", ", _utf8(episode, errors)] if i else [_utf8(episode, errors)]
    pieces += [
        b'], "analysis": ',
        analysis,
        b', "last_receipt": ',
        last_receipt,
        b', "followup_qids": ',
        dumps(followup_qids).encode("utf-8", errors),
        b', "gt_map": ',
        dumps(gt_map).encode("utf-8", errors),
        b"}",
    ]
    return b"".join(pieces)
