"""Where a session's files live under the sessions root (a local folder or an fsspec URL)."""

from __future__ import annotations

import contextlib
import os

from ..locations import AnyPath, as_path, entry_name, forget_listing, fresh_listing, is_local
from ..names import SESSION_STATES, checked_key_name, run_name_problem
from ..runs.files import natural_key

SESSION_FILE = "session.json"
SEGMENTS_DIR = "segments"
# In the store, beside a session's parts: the segments built and their counts.
INDEX = ".index.json"


def session_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a session (the run names' rules), or ``None``."""
    return run_name_problem(name)


def check_session_name(name: str) -> str:
    """``name`` when it is a safe session key; ``ValueError`` naming the rule otherwise."""
    return checked_key_name(name, "session")


def session_dir(root: str | os.PathLike[str] | AnyPath, session: str) -> AnyPath:
    return as_path(root) / check_session_name(session)


def segments_dir(root: str | os.PathLike[str] | AnyPath, session: str) -> AnyPath:
    return session_dir(root, session) / SEGMENTS_DIR


def discover_sessions(root: str | os.PathLike[str] | AnyPath) -> tuple[list[str], dict[str, str]]:
    """Session folders under ``root`` (those with ``segments/``), and invalid names with why."""
    root = as_path(root)
    names: list[str] = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        if is_local(root):
            with os.scandir(root) as entries:
                names = [e.name for e in entries if e.is_dir()]
        else:
            infos = fresh_listing(root)
            names = [entry_name(i) for i in infos if i.get("type") == "directory"]
    valid, invalid = [], {}
    for name in sorted(n for n in names if not n.startswith(".")):
        problem = session_name_problem(name)
        if problem:
            invalid[name] = problem
        elif (root / name / SEGMENTS_DIR).is_dir():
            valid.append(name)
    return valid, invalid


def stored_sessions(store_root: str | os.PathLike[str] | AnyPath) -> list[str]:
    """The sessions that have states in the store, in natural order (as runs are read)."""
    folder = as_path(store_root) / SESSION_STATES
    try:
        forget_listing(folder)
        names = [p.name for p in folder.iterdir() if p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted((n for n in names if not n.startswith(".")), key=natural_key)
