"""The bundled episode formatter: a batch as the curator reads it."""

from __future__ import annotations

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


def format_episode(index: int, episode: dict[str, Any]) -> str:
    """One episode in a few readable lines."""
    return "".join(_pieces(index, episode))


def format_episodes(episodes: list[dict[str, Any]]) -> str:
    """The batch, one block per episode, with its accuracy first."""
    scored = [e for e in episodes if isinstance(e.get("correct"), bool)]
    right = sum(1 for e in scored if e["correct"])
    pieces = [f"{len(episodes)} episodes, {right}/{len(scored)} correct"]
    for i, episode in enumerate(episodes, 1):
        pieces.append("\n")
        pieces += _pieces(i, episode)
    return "".join(pieces)
