"""The prompt inputs as text: the curator template's replacement fields (what the renderer
can fill, checked up front), the tool specs' text, and the bundled episode formatter
(:func:`format_episodes`: a batch as the curator reads it).

``str.format`` decides at render time whether a field works, and the answer often does not
depend on the state at all (``{max_ops!x}``, ``{analysis_block:05d}``, ``{n_cards[0]}``): such
a template would fail every prompt, so it is refused when it is loaded, naming the field.
What does depend on the state (``{version:05d}`` and a text version, ``{last_receipt[40]}``
and a short receipt) is left to each prompt, which is set aside when it fails.
"""

from __future__ import annotations

import _string
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from ..runs.json_read import storable

PLACEHOLDERS = (
    "tool_specs",
    "version",
    "n_cards",
    "skill_catalog",
    "last_receipt",
    "analysis_block",
    "max_ops",
    "param_rule",
)
# Values the original prints the same in every process (no memory address in their repr;
# a class prints as its name).
PLAIN_TYPES = (str, int, float, bool, type(None), list, dict, type)
# Width and precision of a format spec: a larger one only allocates (a width of 10**9 pads
# one value to a gigabyte).
MAX_WIDTH = 100_000
# Per-state values a template is tried with: the version in every JSON type, texts that
# are empty-ish or digits (a nested spec ``{version:{last_receipt}}`` can then succeed).
_VERSIONS: tuple[Any, ...] = (0, "1", 1.5, None, True, [1], {"1": 1})
_TEXTS = (
    {"n_cards": 0, "skill_catalog": "(empty library)", "last_receipt": "", "analysis_block": "-"},
    {"n_cards": 12, "skill_catalog": "3", "last_receipt": "3", "analysis_block": "3"},
)
_STATE_DEPENDENT = (IndexError, KeyError)  # a longer text or another key can have it
RENDER_ERRORS = (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError)
_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as UTF-8 (a lone surrogate), else ``None``."""
    if storable(text):  # the fast test; the search only says where
        return None
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return f"not storable as UTF-8: a lone surrogate {found.group()!r} at character {found.start()}"


class Field(NamedTuple):
    """One top-level replacement field: its text, and its name as ``str.format`` splits it."""

    text: str
    name: str
    format_spec: str


def tool_specs_text(tool_specs: Mapping[Any, Mapping[str, Any]]) -> str:
    """The ``{tool_specs}`` block, in the mapping's order."""
    return "\n".join(f"- {name}: {tool['description']}" for name, tool in tool_specs.items())


def fields(template: str) -> list[Field]:
    """The top-level fields; ``ValueError`` when ``template`` is not a format string."""
    found = []
    for _, name, format_spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        text = name + (f"!{conversion}" if conversion else "")
        text += f":{format_spec}" if format_spec else ""
        found.append(Field("{" + text + "}", name, format_spec or ""))
    return found


def _field_names(template: str) -> Iterator[str]:
    """Every field name, including those nested in a format spec (``{a:{b}}``)."""
    for _, name, format_spec, _ in string.Formatter().parse(template):
        if name is not None:
            yield name
        if format_spec:
            yield from _field_names(format_spec)


def _root(name: str) -> str:
    return re.split(r"[.\[]", name, maxsplit=1)[0]


def _name_problem(name: str) -> str | None:
    root = _root(name)
    if root not in PLACEHOLDERS:
        shown = f"{{{name}}}" if name else "{} (positional)"
        return f"unknown placeholder {shown}"
    try:  # the attribute and item chain, parsed as str.format parses it, values aside
        list(_string.formatter_field_name_split(name)[1])
    except ValueError as exc:
        return f"{{{name}}}: {exc}"
    return None


def _spec_width_problem(text: str, format_spec: str) -> str | None:
    for digits in re.findall(r"\d+", format_spec):
        digits = digits.lstrip("0")
        if len(digits) > 7 or (digits and int(digits) > MAX_WIDTH):
            return f"{text}: width or precision {digits[:20]} is over {MAX_WIDTH}"
    return None


def _width_problem(field: Field) -> str | None:
    return _spec_width_problem(field.text, re.sub(r"\{[^{}]*\}", "", field.format_spec))


@lru_cache(maxsize=32)
def nested_fields(template: str) -> tuple[Field, ...]:
    """Fields whose format spec takes values (``{n_cards:{version}}``)."""
    return tuple(f for f in fields(template) if "{" in f.format_spec)


def nested_width_error(field: Field, values: Mapping[str, Any]) -> str | None:
    """A width the state puts in ``field``'s spec that is over the limit (it only allocates)."""
    try:
        format_spec = field.format_spec.format(**values)
    except RENDER_ERRORS:
        return None  # the field's own rendering names it
    return _spec_width_problem(field.text, format_spec)


def resolve(name: str, values: Mapping[str, Any]) -> Any:
    """The object ``str.format`` prints for field ``name`` (attributes and items followed)."""
    return string.Formatter().get_field(name, (), values)[0]


def opaque_part(value: Any) -> Any:
    """A part of ``value`` that is not plain data (``None``: all of it is), found without
    recursion (a version can nest deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) not in PLAIN_TYPES:
            return item
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def field_error(field: Field, values: Mapping[str, Any]) -> str | None:
    """Why ``field`` cannot be rendered with ``values`` (``None``: it can)."""
    try:
        if "." in field.name or "[" in field.name:
            opaque = opaque_part(resolve(field.name, values))
            if opaque is not None:
                kind = type(opaque).__name__
                return f"{field.text} shows a {kind}, not a value (its repr has a memory address)"
        field.text.format(**values)
    except RENDER_ERRORS as exc:
        return f"{field.text}: {type(exc).__name__}: {exc}"
    return None


def _always_fails(field: Field, fixed: Mapping[str, Any]) -> str | None:
    """The error of ``field`` when it fails whatever the state holds, else ``None``."""
    if {_root(name) for name in _field_names(field.text)} <= fixed.keys():
        return field_error(field, fixed)  # the spec alone decides: no state changes it
    first = None
    for texts in _TEXTS:
        for version in _VERSIONS:
            values = {**fixed, **texts, "version": version}
            try:
                resolve(field.name, values)
            except _STATE_DEPENDENT:
                return None
            except RENDER_ERRORS:
                pass
            try:  # its spec too: ``{n_cards:{analysis_block[1]}}`` needs a longer text
                field.text.format(**values)
            except _STATE_DEPENDENT:
                return None
            except RENDER_ERRORS:
                pass
            error = field_error(field, values)
            if error is None:
                return None
            first = first or error
    return first


def template_problems(template: str, fixed: Mapping[str, Any] | None = None) -> list[str]:
    """What in ``template`` the renderer can never fill.

    With ``fixed`` (``tool_specs``, ``param_rule``, ``max_ops`` as rendered), each field is
    also tried against states of every shape: one that fails for all of them is a problem.
    """
    try:
        names = list(dict.fromkeys(_field_names(template)))  # a field used twice: once
        top = list(dict.fromkeys(fields(template)))
    except ValueError as exc:
        return [f"not a valid format string: {exc}"]
    problems = [p for p in map(_name_problem, names) if p]
    problems += [p for p in map(_width_problem, top) if p]
    if problems or fixed is None:
        return problems
    return [p for p in (_always_fails(f, fixed) for f in top) if p]


@lru_cache(maxsize=32)
def accessor_fields(template: str) -> tuple[Field, ...]:
    """Fields that follow an attribute or an item: only these can reach an opaque object."""
    return tuple(f for f in fields(template) if "." in f.name or "[" in f.name)


def render_error(template: str, values: Mapping[str, Any]) -> str | None:
    """The first field of ``template`` that cannot be rendered with ``values``, described."""
    for field in fields(template):
        error = field_error(field, values)
        if error:
            return error
    return None


def _mark(correct: Any) -> str:
    return "correct" if correct is True else "wrong" if correct is False else "unscored"


def _pieces(index: int, episode: dict[str, Any]) -> list[str]:
    """One episode's text in pieces, each field's value a piece of its own.

    Joined once, by the caller: a huge field is then copied once, not once per line.
    """
    get = episode.get
    pieces = [f"[{index}] ", format(get("id", "?"), ""), " task=", format(get("task", "?"), "")]
    pieces += [" t=", format(get("realtime", "?"), ""), "s -> ", _mark(get("correct"))]
    pieces += ["\n  Q: ", format(get("question", ""), "")]
    options = get("options")
    if isinstance(options, list) and options:
        pieces += ["\n  Options: ", " | ".join(str(o) for o in options)]
    pieces += ["\n  GT: ", format(get("gt", "?"), ""), "  Pred: ", format(get("response", "?"), "")]
    fired = get("fired_cards")
    if isinstance(fired, list) and fired:
        pieces += ["\n  Fired: ", ", ".join(str(c) for c in fired)]
    return pieces


def format_episodes(episodes: list[dict[str, Any]], limit: int | None = None) -> str:
    """The batch, one block per episode, with its accuracy first.

    With ``limit`` (>= 0), only the text's first ``limit`` characters: the same as
    cutting the whole text, but what is cut off is never built (a huge field stays
    where it is; episodes past the limit are not formatted at all).
    """
    scored = [e for e in episodes if isinstance(e.get("correct"), bool)]
    right = sum(1 for e in scored if e["correct"])
    summary = f"{len(episodes)} episodes, {right}/{len(scored)} correct"
    blocks = _batch_blocks(summary, episodes)
    if limit is None:
        return "".join(piece for block in blocks for piece in block)
    kept: list[str] = []
    size = 0
    for block in blocks:  # whole episodes while they fit, then piece by piece
        length = sum(map(len, block))
        if size + length < limit:
            kept += block
            size += length
            continue
        kept.append(_head(block, limit - size))
        break
    return "".join(kept)


def _batch_blocks(summary: str, episodes: list[dict[str, Any]]) -> Iterator[list[str]]:
    yield [summary]
    for i, episode in enumerate(episodes, 1):
        yield ["\n", *_pieces(i, episode)]


def _head(pieces: Iterable[str], limit: int) -> str:
    """``"".join(pieces)[:limit]``, joining only what is kept."""
    kept: list[str] = []
    size = 0
    for piece in pieces:
        length = len(piece)
        if size + length >= limit:
            kept.append(piece[: limit - size])
            break
        kept.append(piece)
        size += length
    return "".join(kept)
