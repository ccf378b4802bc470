"""Offline grading of a completions file against the store's states (``statepool score``).

Each line of the file is ``{"state_id": ..., "completion": ...}`` (the completion a text
or a message list); the lines of one state form a GRPO group. Each group gets its mean
and standard deviation and each line its GRPO advantage, ``(score - mean) / (std +
eps)`` with the sample standard deviation as TRL and verl compute it (a group of one
has advantage 0). Lines that are not such objects and state ids the store lacks are
named with their line numbers; they are never fatal.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StatepoolError
from ..export.collect import collect_export
from ..export.rows import ExportOptions
from ..rejects import bad_line, not_json
from .grader import Grader, reference_from_json, state_from_json
from .score import Grade

ADVANTAGE_EPS = 1e-6


@dataclass(frozen=True)
class StateRecord:
    """What grading an answer for one state needs: the state and its reference ops."""

    state: str
    reference_ops: str


@dataclass
class ScoredLine:
    line: int
    state_id: str
    grade: Grade
    advantage: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "state_id": self.state_id,
            **self.grade.breakdown(),
            "advantage": self.advantage,
            "problems": self.grade.problems,
        }


@dataclass
class ScoreReport:
    """Scored lines, groups, and the lines that could not be scored."""

    path: str
    lines: list[ScoredLine] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)
    unknown_states: dict[str, list[int]] = field(default_factory=dict)
    store_problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every line of the file was scored."""
        return not self.bad_lines and not self.unknown_states

    def groups(self) -> dict[str, dict[str, float]]:
        """Per state: answer count, mean and sample standard deviation of the scores."""
        by_state: dict[str, list[float]] = {}
        for scored in self.lines:
            by_state.setdefault(scored.state_id, []).append(scored.grade.score)
        return {sid: _stats(scores) for sid, scores in by_state.items()}

    def summary(self) -> dict[str, Any]:
        scores = [s.grade.score for s in self.lines]
        return {
            "file": self.path,
            "lines_scored": len(self.lines),
            "groups": len(self.groups()),
            "mean_score": sum(scores) / len(scores) if scores else None,
            "unparsed": sum(1 for s in self.lines if not s.grade.format),
            "bad_lines": len(self.bad_lines),
            "unknown_states": len(self.unknown_states),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "rows": [s.to_dict() for s in self.lines],
            "groups": self.groups(),
            "bad_lines": self.bad_lines,
            "unknown_states": self.unknown_states,
            "store_problems": self.store_problems,
        }


def _stats(scores: list[float]) -> dict[str, float]:
    mean = sum(scores) / len(scores)
    var = sum((s - mean) ** 2 for s in scores) / (len(scores) - 1) if len(scores) > 1 else 0.0
    return {"n": len(scores), "mean": mean, "std": math.sqrt(var)}


def store_states(store: str | os.PathLike[str]) -> tuple[dict[str, StateRecord], list[str]]:
    """Every state of the store by id (a duplicate left out of exports by its kept twin)."""
    export = collect_export(store, ExportOptions(val_fraction=0.0))
    states = {r.state_id: StateRecord(r.state, r.reference_ops) for r in export.rows}
    for dropped, kept in export.duplicates.items():
        states.setdefault(dropped, states[kept])
    # A duplicate is graded as its kept twin: the exports' note about it is no problem here.
    notes = set(export.duplicate_notes)
    return states, [p for p in export.problems if p not in notes]


def read_completions(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    """``(line number, row, problem)`` per non-blank line; ``row`` ``None`` when bad."""
    try:
        handle = path.open(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise StatepoolError(f"cannot read completions file {path}: {exc}") from None
    with handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                yield number, None, not_json(exc)
                continue
            if not isinstance(row, dict):
                yield number, None, f"a JSON {type(row).__name__}, not an object"
            elif not isinstance(row.get("state_id"), str) or not row["state_id"]:
                yield number, None, 'no "state_id" string'
            elif "completion" not in row:
                yield number, None, 'no "completion"'
            else:
                yield number, row, ""


def score_completions(
    path: str | os.PathLike[str], states: dict[str, StateRecord], grader: Grader
) -> ScoreReport:
    """Grade every line of the completions file at ``path`` against ``states``."""
    source = Path(path)
    if not source.is_file():
        what = "a folder, not a file" if source.is_dir() else "does not exist"
        raise StatepoolError(f"{source}: {what}")
    report = ScoreReport(str(source))
    for number, row, problem in read_completions(source):
        if row is None:
            report.bad_lines.append(bad_line(str(source), number, problem))
            continue
        record = states.get(row["state_id"])
        if record is None:
            report.unknown_states.setdefault(row["state_id"], []).append(number)
            continue
        grade = grader.grade(
            row["completion"],
            state_from_json(record.state),
            reference_from_json(record.reference_ops),
        )
        report.lines.append(ScoredLine(number, row["state_id"], grade))
    groups = report.groups()
    for scored in report.lines:
        group = groups[scored.state_id]
        if group["n"] > 1:
            scored.advantage = (scored.grade.score - group["mean"]) / (group["std"] + ADVANTAGE_EPS)
    return report
