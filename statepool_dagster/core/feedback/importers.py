"""Feedback from files: verl's rollout dumps and ``statepool score --json`` output.

Each source file becomes the segments of one writer named after the file's path, size
and modification time, so importing the same file again adds nothing. A line that is
not a usable sample is a reject naming file and line; the rest is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StatepoolError
from ..locations import as_path
from ..rejects import bad_line, not_json
from ..segments import SegmentWriter
from ..segments.writer import highest_seq
from .folders import feedback_folder as feedback_folder
from .records import FeedbackRecord, encode, finite_number, from_breakdown, group_id


@dataclass
class ImportReport:
    """What an import read: records written, rejects, files already imported."""

    records: int = 0
    files: int = 0
    segments: list[str] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)
    already_imported: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "files": self.files,
            "segments": self.segments,
            "rejects": self.rejects,
            "already_imported": self.already_imported,
        }


def _writer_name(kind: str, path: Path) -> str:
    st = path.stat()
    key = f"{path.resolve()}\x1f{st.st_size}\x1f{st.st_mtime_ns}"
    return f"import.{kind}.{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}"


def _number(value: Any) -> float | None:
    return float(value) if finite_number(value) else None


def _lines(path: Path) -> Iterator[tuple[int, Any, str]]:
    """``(line number, value, problem)`` per non-blank line of a JSON-lines file."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw), ""
            except (ValueError, RecursionError) as exc:
                yield number, None, not_json(exc)


def _scored(row: Any, no_state: str) -> tuple[str, float] | str:
    """A row's state id and finite score, or why it has none (``no_state`` for the id)."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    state_id = row.get("state_id")
    if not isinstance(state_id, str) or not state_id:
        return no_state
    score = _number(row.get("score"))
    if score is None:
        return f'"score" {row.get("score")!r} is not a finite number'
    return state_id, score


def _verl_record(row: Any, file_step: int, now: float) -> FeedbackRecord | str:
    scored = _scored(
        row, 'no "state_id" string (is the reward statepool_dagster.rewards.compute_score?)'
    )
    if isinstance(scored, str):
        return scored
    state_id, score = scored
    step = row.get("step", file_step)
    if isinstance(step, bool) or not isinstance(step, int):
        return f'"step" {step!r} is not an integer'
    prompt = row.get("input") if isinstance(row.get("input"), str) else state_id
    parts = {k: v for k, v in row.items() if _number(v) is not None}
    parts["score"] = score
    group = group_id("verl-dump", step, prompt)
    try:
        return from_breakdown(state_id, parts, group=group, time=now, source="verl-dump", step=step)
    except ValueError as exc:
        return str(exc)


def _write(
    folder: str, kind: str, path: Path, rows: Iterator[tuple[int, FeedbackRecord | str]]
) -> ImportReport:
    report = ImportReport(files=1)
    name = _writer_name(kind, path)
    if highest_seq(as_path(folder), name) >= 0:
        report.already_imported.append(str(path))
        return report
    with SegmentWriter(folder, name, max_age=float("inf")) as writer:
        for number, record in rows:
            if isinstance(record, str):
                report.rejects.append(bad_line(str(path), number, record))
                continue
            writer.append(encode(record))
            report.records += 1
    report.segments.extend(writer.sealed)
    return report


def import_verl_dump(folder: str, dump_dir: str | os.PathLike[str]) -> ImportReport:
    """Every ``{step}.jsonl`` of a verl ``trainer.rollout_data_dir`` into ``folder``."""
    source = Path(dump_dir)
    if not source.is_dir():
        what = "not a folder" if source.exists() else "does not exist"
        raise StatepoolError(f"{source}: {what} (a verl dump is a folder)")
    files = sorted(
        (int(p.stem), p) for p in source.glob("*.jsonl") if p.stem.isdigit() and p.is_file()
    )
    total = ImportReport()
    now = time.time()
    for step, path in files:

        def rows(path: Path = path, step: int = step) -> Iterator[tuple[int, Any]]:
            for number, row, problem in _lines(path):
                yield number, problem or _verl_record(row, step, now)

        part = _write(folder, "verl", path, rows())
        _merge(total, part)
    return total


def _score_rows(path: Path) -> Iterator[tuple[str, Any, str]]:
    """``(where, row, problem)``: a ``score --json`` document's rows, or one row a line."""
    text = path.read_bytes()
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("rows"), list):
        for i, row in enumerate(document["rows"]):
            line = row.get("line") if isinstance(row, dict) else None
            yield f"row {i}" + (f" (completions line {line})" if line else ""), row, ""
        return
    for number, row, problem in _lines(path):
        yield f"line {number}", row, problem


def import_scores(folder: str, scores_file: str | os.PathLike[str]) -> ImportReport:
    """The rows of ``statepool score --json`` output into ``folder``; a group per state."""
    path = Path(scores_file)
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "does not exist"
        raise StatepoolError(f"{path}: {what}")
    now = time.time()
    token = _writer_name("scores", path)
    rejects: list[str] = []

    def rows() -> Iterator[tuple[int, FeedbackRecord | str]]:
        for i, (where, row, problem) in enumerate(_score_rows(path)):
            if problem:
                rejects.append(f"{path} {where}: {problem}")
                continue
            record = _score_record(row, token, now)
            if isinstance(record, str):
                rejects.append(f"{path} {where}: {record}")
                continue
            yield i, record

    report = _write(folder, "scores", path, rows())
    report.rejects.extend(rejects)
    return report


def _score_record(row: Any, token: str, now: float) -> FeedbackRecord | str:
    scored = _scored(row, 'no "state_id" string')
    if isinstance(scored, str):
        return scored
    state_id = scored[0]
    parts = {k: v for k, v in row.items() if _number(v) is not None}
    group = group_id("scores", token, state_id)
    try:
        return from_breakdown(state_id, parts, group=group, time=now, source="scores")
    except ValueError as exc:
        return str(exc)


def _merge(total: ImportReport, part: ImportReport) -> None:
    total.records += part.records
    total.files += part.files
    total.segments.extend(part.segments)
    total.rejects.extend(part.rejects)
    total.already_imported.extend(part.already_imported)
