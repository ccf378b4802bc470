"""The curator's op vocabulary, read from the prompt spec's tool specs.

A tool spec names its parameters either in the bundled shape (``"params": {"card_id":
"string", "program": "string (optional)"}``), with per-parameter mappings (``{"type":
"string", "required": false}``), or as an OpenAI-style JSON schema (``"parameters":
{"properties": ..., "required": [...]}``). What an op does to the library (its
*effect*) is the spec's ``"effect"`` (``add``, ``update``, ``delete``, ``merge``) or,
without one, guessed from its name; an op with no known effect is validated but not
applied. Parameters named ``card_id`` or ``card_ids`` (or ending so) refer to cards
that must exist. An op whose spec says ``"allow_same_card": true`` may touch a card
another op of the same answer touches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Effect = Literal["add", "update", "delete", "merge"]
ParamType = Literal["string", "integer", "number", "boolean", "list", "object", "any"]
EFFECTS: tuple[Effect, ...] = ("add", "update", "delete", "merge")
TEXT_FIELDS = ("trigger", "program")

_EFFECT_WORDS: tuple[tuple[Effect, tuple[str, ...]], ...] = (
    ("merge", ("merge", "combine")),
    ("delete", ("delete", "remove", "drop", "prune")),
    ("update", ("update", "rewrite", "edit", "modify", "revise", "replace")),
    ("add", ("add", "create", "new", "insert")),
)
_TYPE_WORDS: tuple[tuple[ParamType, tuple[str, ...]], ...] = (
    ("list", ("list", "array", "[]")),
    ("integer", ("integer", "int")),
    ("number", ("number", "float", "double")),
    ("boolean", ("boolean", "bool")),
    ("object", ("object", "dict", "mapping")),
    ("string", ("string", "str", "text")),
)


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of an op: its type and whether the op needs it."""

    name: str
    type: ParamType
    required: bool

    @property
    def card_ref(self) -> Literal["one", "many"] | None:
        """``one`` for a ``card_id``, ``many`` for ``card_ids``: a reference to existing cards."""
        if self.name.endswith("card_ids"):
            return "many"
        if self.name.endswith("card_id"):
            return "one"
        return None

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` has this parameter's type (a card id may be a string or an int)."""
        if self.card_ref == "one":
            return _is_card_id(value)
        if self.card_ref == "many":
            return isinstance(value, list) and all(_is_card_id(v) for v in value)
        checks = {
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "list": lambda v: isinstance(v, list),
            "object": lambda v: isinstance(v, dict),
            "any": lambda v: True,
        }
        return checks[self.type](value)


def _is_card_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


@dataclass(frozen=True)
class OpSpec:
    """One op of the vocabulary."""

    name: str
    effect: Effect | None
    params: tuple[ParamSpec, ...]
    allow_same_card: bool = False

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.required)


@dataclass(frozen=True)
class Vocabulary:
    """The ops a curator may answer with, by name."""

    ops: Mapping[str, OpSpec]

    @staticmethod
    def from_tool_specs(specs: Mapping[str, Mapping[str, Any]]) -> Vocabulary:
        return Vocabulary({name: op_spec(name, spec) for name, spec in specs.items()})

    def names(self) -> str:
        return ", ".join(self.ops)


def _param_type(text: str) -> ParamType:
    words = re.findall(r"[a-z]+|\[\]", text.lower())
    for kind, names in _TYPE_WORDS:
        if any(w in names for w in words):
            return kind
    return "any"


def _param(name: str, declared: Any, required: bool | None = None) -> ParamSpec:
    """A parameter from ``"string (optional)"`` or ``{"type": ..., "required": ...}``."""
    if isinstance(declared, Mapping):
        raw_type = declared.get("type", "any")
        kind = _param_type(" ".join(raw_type) if isinstance(raw_type, list) else str(raw_type))
        if required is None:
            required = bool(declared.get("required", "optional" not in str(declared)))
        return ParamSpec(name, kind, required)
    text = str(declared)
    if required is None:
        required = "optional" not in text.lower()
    return ParamSpec(name, _param_type(text), required)


def _effect(name: str, spec: Mapping[str, Any]) -> Effect | None:
    declared = spec.get("effect")
    if declared in EFFECTS:
        return declared
    words = re.findall(r"[a-z]+", name.lower())
    for effect, names in _EFFECT_WORDS:
        if any(w in names for w in words):
            return effect
    return None


def op_spec(name: str, spec: Mapping[str, Any]) -> OpSpec:
    """An :class:`OpSpec` from one tool spec (bundled shape or JSON schema)."""
    params: list[ParamSpec] = []
    declared = spec.get("params")
    schema = spec.get("parameters")
    if isinstance(declared, Mapping):
        params = [_param(str(k), v) for k, v in declared.items()]
    elif isinstance(schema, Mapping) and isinstance(schema.get("properties"), Mapping):
        required = set(schema.get("required") or ())
        params = [_param(str(k), v, k in required) for k, v in schema["properties"].items()]
    return OpSpec(
        name=name,
        effect=_effect(name, spec),
        params=tuple(params),
        allow_same_card=bool(spec.get("allow_same_card", False)),
    )
