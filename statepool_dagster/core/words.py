"""Counts in words: "1 run", "2 runs", for every message and summary the pipeline prints."""

from __future__ import annotations


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word``, in the plural (``many``, else ``word`` + "s") unless it is 1."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
