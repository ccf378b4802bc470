"""Per-state statistics of feedback, folded incrementally from sealed segments.

The fold keeps compact accumulators (Welford sums) per state and per open group, saved
in the store as Parquet plus one JSON manifest naming the segments already folded, so
each fold reads only new segments. A group (the answers to one prompt in one step) is
open while it may still grow: until ``close_seconds`` after its last answer. A closed
group's spread goes into its state's accumulators; open groups are added when the
table is made, so the table is always up to date.

Spreads are sample standard deviations (``n - 1``, as TRL and verl compute a group's);
a group of one answer has no spread and is never counted as zero-variance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..locations import AnyPath
from ..names import LAST_STDS
from ..segments import iter_segment_lines
from ..segments.reader import OversizeLine
from .records import BadRecord, FeedbackRecord, decode

ZERO_STD = 1e-12
DEFAULT_CLOSE_SECONDS = 600.0
BAD_KEPT = 20
# Sources whose groups are whole in the segments one import writes: closed once folded.
WHOLE_GROUP_SOURCES = frozenset({"verl-dump", "scores"})

# A state's accumulator: [answers, score mean, score m2, matches, answers with a reference,
# groups, groups of 2+, zero-variance groups, last step, last time, last spreads];
# an open group's: [answers, mean, m2, first time, last time].


def _welford(acc: list[Any], i: int, x: float) -> None:
    """Add ``x`` to the count/mean/m2 at ``acc[i:i+3]``."""
    n = acc[i] + 1
    delta = x - acc[i + 1]
    acc[i] = n
    acc[i + 1] += delta / n
    acc[i + 2] += delta * (x - acc[i + 1])


def _std(n: float, m2: float) -> float:
    return math.sqrt(max(m2, 0.0) / (n - 1)) if n > 1 else 0.0


@dataclass
class Fold:
    """The fold's state: per-state and per-open-group accumulators, segments folded."""

    states: dict[str, list[Any]] = field(default_factory=dict)
    groups: dict[str, list[Any]] = field(default_factory=dict)
    group_state: dict[str, str] = field(default_factory=dict)
    folded: set[str] = field(default_factory=set)
    records: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    generation: int = 0
    whole: set[str] = field(default_factory=set)  # groups to close after this fold

    def add(self, r: FeedbackRecord) -> None:
        s = self.states.get(r.state_id)
        if s is None:
            s = self.states[r.state_id] = [0, 0.0, 0.0, 0, 0, 0, 0, 0, None, 0.0, []]
        _welford(s, 0, r.score)
        if r.ops_match is not None:
            s[3] += r.ops_match
            s[4] += 1
        if r.step is not None and (s[8] is None or r.step > s[8]):
            s[8] = r.step
        s[9] = max(s[9], r.time)
        g = self.groups.get(r.group)
        if g is None:
            g = self.groups[r.group] = [0, 0.0, 0.0, r.time, r.time]
            self.group_state[r.group] = r.state_id
        _welford(g, 0, r.score)
        g[3] = min(g[3], r.time)
        g[4] = max(g[4], r.time)
        if r.source in WHOLE_GROUP_SOURCES:
            self.whole.add(r.group)
        self.records += 1

    def close_groups(self, before: float) -> int:
        """Fold groups whose last answer is older than ``before`` (or that an import wrote
        whole) into their states."""
        whole, self.whole = self.whole, set()
        done = sorted(
            (g[3], gid) for gid, g in self.groups.items() if g[4] < before or gid in whole
        )  # oldest first: the states' last spreads stay in order
        for _, gid in done:
            g = self.groups.pop(gid)
            _close(self.states[self.group_state.pop(gid)], g)
        return len(done)

    def fold_segment(self, path: AnyPath, name: str) -> None:
        for number, line in iter_segment_lines(path):
            if isinstance(line, OversizeLine):
                self._bad(f"{name} line {number}: a line of {line.length} bytes")
                continue
            record = decode(line)
            if isinstance(record, BadRecord):
                self._bad(f"{name} line {number}: {record.error}")
                continue
            self.add(record)
        self.folded.add(name)

    def _bad(self, what: str) -> None:
        self.bad += 1
        if len(self.bad_examples) < BAD_KEPT:
            self.bad_examples.append(what)

    def table(self) -> pa.Table:
        """One row per state: the closed groups' figures with the open ones added."""
        extra: dict[str, list[list[Any]]] = {}
        for gid, g in sorted(self.groups.items(), key=lambda item: item[1][3]):
            extra.setdefault(self.group_state[gid], []).append(g)
        columns: dict[str, list[Any]] = {c: [] for c in STATS_COLUMNS}
        for sid in sorted(self.states):
            s = self.states[sid]
            if sid in extra:
                s = [*s[:10], list(s[10])]
                for g in extra[sid]:
                    _close(s, g)
            spread = s[6]
            row = {
                "state_id": sid,
                "groups": s[5],
                "answers": s[0],
                "score_mean": s[1],
                "score_std": _std(s[0], s[2]),
                "zero_variance_groups": s[7],
                "zero_variance_share": s[7] / spread if spread else None,
                "last_stds": s[10],
                "last_step": s[8],
                "ops_match_rate": s[3] / s[4] if s[4] else None,
                "ops_match_answers": s[4],
                "last_seen": s[9],
            }
            for name, value in row.items():
                columns[name].append(value)
        return pa.table(columns, schema=STATS_SCHEMA)


def _close(s: list[Any], g: list[Any]) -> None:
    s[5] += 1
    if g[0] > 1:
        std = _std(g[0], g[2])
        s[6] += 1
        s[7] += std <= ZERO_STD
        s[10] = [*s[10], std][-LAST_STDS:]


STATS_SCHEMA = pa.schema(
    [
        ("state_id", pa.string()),
        ("groups", pa.int64()),
        ("answers", pa.int64()),
        ("score_mean", pa.float64()),
        ("score_std", pa.float64()),
        ("zero_variance_groups", pa.int64()),
        ("zero_variance_share", pa.float64()),
        ("last_stds", pa.list_(pa.float64())),
        ("last_step", pa.int64()),
        ("ops_match_rate", pa.float64()),
        ("ops_match_answers", pa.int64()),
        ("last_seen", pa.float64()),
    ]
)
STATS_COLUMNS = STATS_SCHEMA.names
