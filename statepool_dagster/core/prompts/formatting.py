"""The bundled episode formatter: a batch as the curator reads it."""

from __future__ import annotations

from typing import Any


def _mark(correct: Any) -> str:
    if correct is True:
        return "correct"
    if correct is False:
        return "wrong"
    return "unscored"


def format_episode(index: int, episode: dict[str, Any]) -> str:
    """One episode in a few readable lines."""
    head = (
        f"[{index}] {episode.get('id', '?')} task={episode.get('task', '?')} "
        f"t={episode.get('realtime', '?')}s -> {_mark(episode.get('correct'))}"
    )
    lines = [head, f"  Q: {episode.get('question', '')}"]
    options = episode.get("options")
    if isinstance(options, list) and options:
        lines.append("  Options: " + " | ".join(str(o) for o in options))
    lines.append(f"  GT: {episode.get('gt', '?')}  Pred: {episode.get('response', '?')}")
    fired = episode.get("fired_cards")
    if isinstance(fired, list) and fired:
        lines.append("  Fired: " + ", ".join(str(c) for c in fired))
    return "\n".join(lines)


def format_episodes(episodes: list[dict[str, Any]]) -> str:
    """The batch, one block per episode, with its accuracy first."""
    scored = [e for e in episodes if isinstance(e.get("correct"), bool)]
    right = sum(1 for e in scored if e["correct"])
    summary = f"{len(episodes)} episodes, {right}/{len(scored)} correct"
    blocks = [format_episode(i, e) for i, e in enumerate(episodes, 1)]
    return "\n".join([summary, *blocks])
