"""Typed views of a run's records, and the checkpoint state the curator sees.

The state keeps the records as the plain dicts they were read as, so unknown
fields (researchers add them) and key order survive untouched; the pydantic
models validate those dicts and give typed access where logic needs it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from pydantic import BaseModel, ConfigDict, Field, StrictInt

_decode = msgspec.json.Decoder().decode


class Episode(BaseModel):
    """One line of ``episodes.jsonl``: a question answered under one library version."""

    model_config = ConfigDict(extra="allow")

    skill_lib_version: StrictInt = 0
    id: Any = None
    task: Any = None
    question: Any = None
    gt: Any = None
    response: Any = None
    correct: Any = None


class CardMeta(BaseModel):
    """Usage counters the evolution loop keeps for a card."""

    model_config = ConfigDict(extra="allow")

    injected: Any = 0
    fired: Any = 0
    helped: Any = 0
    harmful: Any = 0


class Card(BaseModel):
    """A skill card: when it applies (``trigger``) and what to do (``program``)."""

    model_config = ConfigDict(extra="allow")

    card_id: str | int
    trigger: str
    program: str
    meta_info: CardMeta = Field(default_factory=CardMeta)


class SkillLibrary(BaseModel):
    """A ``skills_v<k>.json`` snapshot, embeddings already removed."""

    model_config = ConfigDict(extra="allow")

    version: Any = None
    cards: list[Card] = Field(default_factory=list)


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
    def trusted(text: str | bytes) -> CheckpointState:
        """:meth:`from_json` for a text this package wrote itself: parsed fast, not validated."""
        return CheckpointState.model_construct(**decode_stored(text))


def decode_stored(text: str | bytes) -> Any:
    """A JSON text this package stored (a library, a record), read back fast.

    msgspec first; what it refuses (``NaN``, ``Infinity``, ``1e999``, which ``json.dumps``
    writes) is read by ``json`` itself.
    """
    try:
        return _decode(text)
    except msgspec.MsgspecError:
        return json.loads(text)


def dumps(value: Any) -> str:
    """The original's JSON text for ``value`` (``json.dumps``, ``ensure_ascii=False``)."""
    return json.dumps(value, ensure_ascii=False)


def state_json(
    state_id: str,
    dataset: str,
    library_json: str,
    episode_jsons: list[str],
    analysis: dict[str, Any] | None,
    last_receipt: str,
    followup_qids: list[str],
    gt_map: dict[str, Any],
) -> str:
    """:meth:`CheckpointState.to_json`, from a library and episodes already in :func:`dumps` form.

    Without indentation ``json.dumps`` writes a nested value exactly as it writes it
    alone, so the text is assembled from the stored parts instead of decoding them
    and encoding the whole state again.
    """
    return "".join(
        (
            '{"state_id": ',
            dumps(state_id),
            ', "dataset": ',
            dumps(dataset),
            ', "lib_snapshot": ',
            library_json,
            ', "episodes": [',
            ", ".join(episode_jsons),
            '], "analysis": ',
            dumps(analysis),
            ', "last_receipt": ',
            dumps(last_receipt),
            ', "followup_qids": ',
            dumps(followup_qids),
            ', "gt_map": ',
            dumps(gt_map),
            "}",
        )
    )
