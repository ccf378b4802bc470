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
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from ..locations import AnyPath
from ..names import LAST_STDS
from ..segments import iter_segment_lines
from ..segments.reader import OversizeLine
from .history import Histories
from .records import BadRecord, FeedbackRecord, decode

ZERO_STD = 1e-12
DEFAULT_CLOSE_SECONDS = 600.0
BAD_KEPT = 20
# Sources whose groups are whole in the segments one import writes: closed once folded.
WHOLE_GROUP_SOURCES = frozenset({"verl-dump", "scores"})


@dataclass(slots=True)
class StateTally:
    """A state's accumulators; the fields are the saved columns, in their order."""

    answers: int = 0
    score_mean: float = 0.0
    score_m2: float = 0.0
    match_n: int = 0  # answers whose operations matched the reference
    match_known: int = 0  # answers with a reference to match
    groups: int = 0
    spread_groups: int = 0  # groups of 2+ answers
    zero_groups: int = 0
    last_step: int | None = None
    last_time: float = 0.0
    last_stds: list[float] = field(default_factory=list)

    def close(self, g: GroupTally) -> None:
        """Count the closed group ``g``: its spread when it has one."""
        self.groups += 1
        if g.n > 1:
            std = _std(g.n, g.m2)
            self.spread_groups += 1
            self.zero_groups += std <= ZERO_STD
            self.last_stds = [*self.last_stds, std][-LAST_STDS:]


@dataclass(slots=True)
class GroupTally:
    """An open group's accumulators; the fields are the saved columns, in their order."""

    n: int
    mean: float
    m2: float
    first_time: float
    last_time: float


def _welford(n: int, mean: float, m2: float, x: float) -> tuple[int, float, float]:
    """The count, mean and m2 with ``x`` added."""
    n += 1
    delta = x - mean
    mean += delta / n
    return n, mean, m2 + delta * (x - mean)


def _std(n: float, m2: float) -> float:
    return math.sqrt(max(m2, 0.0) / (n - 1)) if n > 1 else 0.0


@dataclass
class Fold:
    """The fold's state: per-state and per-open-group accumulators, segments folded."""

    states: dict[str, StateTally] = field(default_factory=dict)
    groups: dict[str, GroupTally] = field(default_factory=dict)
    group_state: dict[str, str] = field(default_factory=dict)
    folded: set[str] = field(default_factory=set)
    records: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    generation: int = 0
    whole: set[str] = field(default_factory=set)  # groups to close after this fold
    history: Histories = field(default_factory=Histories)  # each state's, by step

    def add(self, r: FeedbackRecord) -> None:
        s = self.states.get(r.state_id)
        if s is None:
            s = self.states[r.state_id] = StateTally()
        s.answers, s.score_mean, s.score_m2 = _welford(s.answers, s.score_mean, s.score_m2, r.score)
        if r.ops_match is not None:
            s.match_n += r.ops_match
            s.match_known += 1
        if r.step is not None and (s.last_step is None or r.step > s.last_step):
            s.last_step = r.step
        if r.time > s.last_time:
            s.last_time = r.time
        g = self.groups.get(r.group)
        self.history.add(r, new_group=g is None)  # a group is one draw of its state
        if g is None:
            g = self.groups[r.group] = GroupTally(0, 0.0, 0.0, r.time, r.time)
            self.group_state[r.group] = r.state_id
        g.n, g.mean, g.m2 = _welford(g.n, g.mean, g.m2, r.score)
        if r.time < g.first_time:
            g.first_time = r.time
        if r.time > g.last_time:
            g.last_time = r.time
        if r.source in WHOLE_GROUP_SOURCES:
            self.whole.add(r.group)
        self.records += 1

    def close_groups(self, before: float) -> int:
        """Fold groups whose last answer is older than ``before`` (or that an import wrote
        whole) into their states."""
        whole, self.whole = self.whole, set()
        done = sorted(
            (g.first_time, gid)
            for gid, g in self.groups.items()
            if g.last_time < before or gid in whole
        )  # oldest first: the states' last spreads stay in order
        for _, gid in done:
            self.states[self.group_state.pop(gid)].close(self.groups.pop(gid))
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
        extra: dict[str, list[GroupTally]] = {}
        for gid, g in sorted(self.groups.items(), key=lambda item: item[1].first_time):
            extra.setdefault(self.group_state[gid], []).append(g)
        columns: dict[str, list[Any]] = {c: [] for c in STATS_COLUMNS}
        for sid in sorted(self.states):
            s = self.states[sid]
            if sid in extra:
                s = replace(s)  # close() rebinds last_stds, never mutates it
                for g in extra[sid]:
                    s.close(g)
            row = {
                "state_id": sid,
                "groups": s.groups,
                "answers": s.answers,
                "score_mean": s.score_mean,
                "score_std": _std(s.answers, s.score_m2),
                "zero_variance_groups": s.zero_groups,
                "zero_variance_share": s.zero_groups / s.spread_groups if s.spread_groups else None,
                "last_stds": s.last_stds,
                "last_step": s.last_step,
                "ops_match_rate": s.match_n / s.match_known if s.match_known else None,
                "ops_match_answers": s.match_known,
                "last_seen": s.last_time,
            }
            for name, value in row.items():
                columns[name].append(value)
        return pa.table(columns, schema=STATS_SCHEMA)


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
