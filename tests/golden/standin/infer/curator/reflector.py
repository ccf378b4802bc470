"""A stand-in episode formatter, independent of the project's bundled one."""


def format_episodes(episodes):
    lines = [f"{len(episodes)} Episoden"]
    for e in episodes:
        mark = {True: "✓", False: "✗"}.get(e.get("correct"), "?")
        lines.append(
            f"{mark} {e.get('id', '?')}: {e.get('question', '')} → {e.get('response', '')}"
        )
    return "\n".join(lines)
