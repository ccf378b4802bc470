"""The bundled episode formatter: a batch as the curator reads it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def _mark(correct: Any) -> str:
    if correct is True:
        return "correct"
    if correct is False:
        return "wrong"
    return "unscored"


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
