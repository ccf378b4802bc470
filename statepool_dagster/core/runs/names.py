"""Which folder names may become partition keys and paths."""

from __future__ import annotations

import re

MAX_RUN_NAME = 200
_ALLOWED = re.compile(r"[A-Za-z0-9._-]+")


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run partition key, or ``None`` when it can."""
    if not name:
        return "empty name"
    if len(name) > MAX_RUN_NAME:
        return f"longer than {MAX_RUN_NAME} characters"
    if name.startswith("."):
        return "starts with a dot"
    if not _ALLOWED.fullmatch(name):
        bad = sorted({c for c in name if not _ALLOWED.fullmatch(c)})
        shown = ", ".join(repr(c) for c in bad[:5])
        return f"characters outside [A-Za-z0-9._-]: {shown}"
    return None


def check_run_name(name: str) -> str:
    """Return ``name`` if it is a safe run key; raise ``ValueError`` naming the rule otherwise."""
    problem = run_name_problem(name)
    if problem:
        raise ValueError(f"invalid run name {name!r}: {problem}")
    return name
