"""Which folder names may become run partition keys and paths."""

from __future__ import annotations

from ..names import key_name_problem

MAX_RUN_NAME = 200


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run partition key, or ``None`` when it can."""
    return key_name_problem(name, MAX_RUN_NAME)


def check_run_name(name: str) -> str:
    """Return ``name`` if it is a safe run key; raise ``ValueError`` naming the rule otherwise."""
    problem = run_name_problem(name)
    if problem:
        raise ValueError(f"invalid run name {name!r}: {problem}")
    return name
