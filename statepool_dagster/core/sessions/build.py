"""Bring a session's store up to date with its sealed segments: only new ones are read."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..locations import AnyPath, as_path
from ..names import SESSION_REJECTS
from ..prompts.spec import PromptSpec
from ..segments.reader import DEFAULT_MAX_LINE, list_segments
from ..store.layout import StoreLayout
from ..words import plural
from .layout import check_session_name, segments_dir
from .store import SessionFolders, build_segment


@dataclass
class SessionBuild:
    """One build of a session: what it read now, and the session's totals after it."""

    session: str
    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    segments: int = 0
    states: int = 0
    unique: int = 0
    prompts: int = 0
    rejects: int = 0
    writers: list[str] = field(default_factory=list)
    policy_steps: tuple[int, int] | None = None
    reject_details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    missing: bool = False  # the session's folder is not on disk (its stored states stay)


def build_session(
    sessions_root: str | os.PathLike[str] | AnyPath,
    store_root: str | os.PathLike[str] | AnyPath,
    session: str,
    spec: PromptSpec,
    max_line: int = DEFAULT_MAX_LINE,
) -> SessionBuild:
    """Build the session's sealed segments not built yet; drop parts of segments gone from disk.

    A segment whose size changed (replaced by hand) is built again; its name stays its key.
    """
    started = time.perf_counter()
    check_session_name(session)
    folders = SessionFolders(store_root, session)
    result = SessionBuild(session)
    with StoreLayout(as_path(store_root)).lock(session):
        folders.show_old_ingest_rejects()
        index = folders.load_index(bad_as_empty=True)
        folder = segments_dir(sessions_root, session)
        on_disk = {s.name: s for s in list_segments(folder)}
        # A session folder gone from disk leaves the pool as it was; a segment gone from a
        # session that is still there was removed on purpose and leaves with it.
        gone = set(index) - set(on_disk) if folder.is_dir() else set()
        for name in sorted(gone):
            folders.drop(name)
            del index[name]
            result.dropped.append(name)
        if result.dropped:
            folders.save_index(index)
        for name, segment in on_disk.items():
            if index.get(name, {}).get("stamp") == segment.size:
                continue
            report = build_segment(folders, segment, spec, max_line)
            steps = sorted(report.policy_steps)
            index[name] = {
                "stamp": segment.size,
                "writer": segment.writer,
                "states": report.states,
                "unique": report.unique,
                "prompts": report.prompts,
                "rejects": len(report.rejects),
                "steps": [steps[0], steps[-1]] if steps else None,
            }
            folders.save_index(index)  # after each segment: a killed build keeps its progress
            result.built.append(name)
            result.reject_details += [r.describe() for r in report.rejects[:20]]
    result.missing = not folder.is_dir()
    ingested = folders.ingest_reject_counts()
    _totals(result, index, sum(ingested.values()))
    result.reject_details += [
        f"{SESSION_REJECTS}/{session}/{name}: {plural(n, 'line')} statepool ingest could not read"
        for name, n in ingested.items()
    ]
    result.seconds = time.perf_counter() - started
    return result


def _totals(result: SessionBuild, index: dict[str, dict[str, Any]], ingest_rejects: int) -> None:
    result.segments = len(index)
    result.rejects = ingest_rejects  # lines ``statepool ingest`` could not read
    steps: list[int] = []
    writers: set[str] = set()
    for entry in index.values():
        result.states += entry["states"]
        result.unique += entry["unique"]
        result.prompts += entry["prompts"]
        result.rejects += entry["rejects"]
        writers.add(entry["writer"])
        steps += entry["steps"] or []
    result.writers = sorted(writers)
    result.policy_steps = (min(steps), max(steps)) if steps else None


def session_totals(store_root: str | os.PathLike[str] | AnyPath, session: str) -> SessionBuild:
    """The session's totals as last built, read from its index only."""
    result = SessionBuild(session)
    folders = SessionFolders(store_root, session)
    _totals(
        result, folders.load_index(bad_as_empty=True), sum(folders.ingest_reject_counts().values())
    )
    return result


def pending_segments(
    sessions_root: str | os.PathLike[str] | AnyPath,
    store_root: str | os.PathLike[str] | AnyPath,
    session: str,
) -> list[str]:
    """Sealed segments not built yet (or changed since), and built ones gone from disk."""
    index = SessionFolders(store_root, session).load_index(bad_as_empty=True)
    folder = segments_dir(sessions_root, session)
    on_disk = {s.name: s.size for s in list_segments(folder)}
    changed = [n for n, size in on_disk.items() if index.get(n, {}).get("stamp") != size]
    gone = sorted(set(index) - set(on_disk)) if folder.is_dir() else []
    return changed + gone
