"""Each state's history in the feedback fold: per policy step, its draws, rewards and weight.

A state's history is a list of step buckets in step order. A bucket holds the records of
one step (or, once merged, of a range of steps): the groups drawn (a GRPO group is one draw
of the state), the answers, their mean and variance, the ops-match counts, and so the
weights the selection rules would give from that step alone (``--weight std``: the step's
reward std; ``pass-rate``: p(1 - p) of its match rate). Records without a step (verl's
``compute_score`` is not told it) share one bucket whose step is null.

The size is bounded: a state keeps at most :data:`HISTORY_STEPS` buckets; past that, the
older half is merged pairwise (neighbouring steps into one range), so recent steps stay
one a bucket and older ones grow coarser: at most 128 rows a state, whatever the length
of the run.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import pyarrow as pa

from ..scales import UNSEEN_WEIGHT
from .records import FeedbackRecord

HISTORY_STEPS = 128


@dataclass(slots=True)
class StepBucket:
    """One step's (or merged steps') records of one state; the fields are saved as columns."""

    step_first: int | None
    step_last: int | None
    draws: int = 0
    answers: int = 0
    score_mean: float = 0.0
    score_m2: float = 0.0
    match_n: int = 0
    match_known: int = 0
    last_time: float = 0.0

    def add(self, r: FeedbackRecord, new_group: bool) -> None:
        if new_group:
            self.draws += 1
        n = self.answers = self.answers + 1
        score = r.score
        delta = score - self.score_mean
        mean = self.score_mean = self.score_mean + delta / n
        self.score_m2 += delta * (score - mean)
        if r.ops_match is not None:
            self.match_n += r.ops_match
            self.match_known += 1
        if r.time > self.last_time:
            self.last_time = r.time

    def merge(self, other: StepBucket) -> None:
        """Take in ``other``, the bucket of the steps right after this one's (Chan's sums)."""
        n = self.answers + other.answers
        if n:
            delta = other.score_mean - self.score_mean
            self.score_m2 += other.score_m2 + delta * delta * self.answers * other.answers / n
            self.score_mean += delta * other.answers / n
        self.answers = n
        self.step_last = other.step_last
        self.draws += other.draws
        self.match_n += other.match_n
        self.match_known += other.match_known
        self.last_time = max(self.last_time, other.last_time)


def add_record(history: list[StepBucket], r: FeedbackRecord, new_group: bool) -> None:
    """Count ``r`` in its step's bucket of a state's ``history`` (kept in step order)."""
    step = r.step
    if step is None:
        if not history or history[0].step_first is not None:
            history.insert(0, StepBucket(None, None))
        history[0].add(r, new_group)
        return
    last = history[-1] if history else None
    if last is not None and last.step_last == step:  # most records: the newest step's
        last.add(r, new_group)
        return
    if last is not None and last.step_first is not None and last.step_first <= step:
        if step > last.step_last:
            history.append(StepBucket(step, step))
        history[-1].add(r, new_group)
    else:  # an earlier step than the newest: its bucket, or a new one in its place
        start = 1 if history and history[0].step_first is None else 0
        firsts = [b.step_first for b in history[start:]]
        at = start + bisect_right(firsts, step) - 1
        if at >= start and history[at].step_last >= step:
            history[at].add(r, new_group)
        else:
            history.insert(at + 1, StepBucket(step, step))
            history[at + 1].add(r, new_group)
    if len(history) > HISTORY_STEPS:
        _merge_older_half(history)


def _merge_older_half(history: list[StepBucket]) -> None:
    start = 1 if history[0].step_first is None else 0
    older = (len(history) - start) // 2
    merged = []
    for k in range(start, start + older - 1, 2):
        history[k].merge(history[k + 1])
        merged.append(history[k])
    if older % 2:
        merged.append(history[start + older - 1])
    history[start:] = merged + history[start + older :]


# The columns a bucket's saved row and its history row begin with: the state, its steps,
# draws, answers and mean score.
_BUCKET = [
    ("state_id", pa.string()),
    ("step_first", pa.int64()),
    ("step_last", pa.int64()),
    ("draws", pa.int64()),
    ("answers", pa.int64()),
    ("score_mean", pa.float64()),
]
# The saved accumulators: a row per state and bucket, the fields of StepBucket, by state id
# then step (the null step first).
ACCUMULATOR_SCHEMA = pa.schema(
    [
        *_BUCKET,
        ("score_m2", pa.float64()),
        ("match_n", pa.int64()),
        ("match_known", pa.int64()),
        ("last_time", pa.float64()),
    ]
)
_FIELDS = ACCUMULATOR_SCHEMA.names[1:]


class Histories:
    """Every state's history: the saved rows as they were read, and the buckets of the states
    new records came for (made from their saved rows when the first one comes), so a fold
    of one more segment costs that segment's states, not the pool's."""

    def __init__(self, saved: pa.Table | None = None):
        self.saved = ACCUMULATOR_SCHEMA.empty_table() if saved is None else saved
        self.touched: dict[str, list[StepBucket]] = {}
        self._spans: dict[str, tuple[int, int]] = {}
        self._columns: list[list] | None = None
        ids = self.saved["state_id"].to_pylist()
        start = 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or ids[end] != ids[start]:
                self._spans[ids[start]] = (start, end)
                start = end

    def buckets(self, state_id: str) -> list[StepBucket]:
        """The state's buckets, in step order, to add to."""
        found = self.touched.get(state_id)
        if found is None:
            found = self.touched[state_id] = []
            span = self._spans.get(state_id)
            if span is not None:
                if self._columns is None:  # read as Python values once: slices cost more
                    self._columns = list(self.saved.select(_FIELDS).to_pydict().values())
                columns = self._columns
                found.extend(StepBucket(*(c[i] for c in columns)) for i in range(*span))
        return found

    def add(self, r: FeedbackRecord, new_group: bool) -> None:
        found = self.touched.get(r.state_id)
        add_record(self.buckets(r.state_id) if found is None else found, r, new_group)

    def table(self) -> pa.Table:
        """The accumulators to save: the untouched states' saved rows and the others' buckets."""
        import pyarrow.compute as pc

        kept = self.saved
        if self.touched:
            mask = pc.is_in(kept["state_id"], value_set=pa.array(list(self.touched), pa.string()))
            kept = kept.filter(pc.invert(mask))
        rows = [(sid, b) for sid, found in self.touched.items() for b in found]
        columns = [[sid for sid, _ in rows], *([getattr(b, c) for _, b in rows] for c in _FIELDS)]
        new = pa.table(columns, schema=ACCUMULATOR_SCHEMA)
        whole = pa.concat_tables([kept, new]).combine_chunks()
        first = pc.fill_null(whole["step_first"], -(2**63))  # the null step first
        order = pa.table({"state_id": whole["state_id"], "step": first})
        at = pc.sort_indices(order, sort_keys=[("state_id", "ascending"), ("step", "ascending")])
        return whole.take(at)


HISTORY_SCHEMA = pa.schema(
    [
        *_BUCKET,
        ("score_var", pa.float64()),
        ("ops_match_rate", pa.float64()),
        ("weight_std", pa.float64()),
        ("weight_pass_rate", pa.float64()),
        ("last_seen", pa.float64()),
    ]
)


def history_table(saved: pa.Table) -> pa.Table:
    """Readers' table from the saved accumulators: each bucket's variance (sample, n - 1;
    null under 2 answers), ops-match rate and the two weights, computed column-wise."""
    import pyarrow.compute as pc

    answers, known = saved["answers"], saved["match_known"]
    var = pc.if_else(
        pc.greater(answers, 1),
        pc.divide(saved["score_m2"], pc.cast(pc.subtract(answers, 1), pa.float64())),
        pa.scalar(None, pa.float64()),
    )
    rate = pc.if_else(
        pc.greater(known, 0),
        pc.divide(pc.cast(saved["match_n"], pa.float64()), pc.cast(known, pa.float64())),
        pa.scalar(None, pa.float64()),
    )
    spread = pc.sqrt(pc.max_element_wise(var, 0.0, skip_nulls=False))
    std = pc.min_element_wise(spread, UNSEEN_WEIGHT["std"], skip_nulls=False)
    pass_rate = pc.multiply(rate, pc.subtract(1.0, rate))
    columns = [saved[c] for c in ("state_id", "step_first", "step_last", "draws", "answers",
                                  "score_mean")]  # fmt: skip
    columns += [var, rate, std, pass_rate, saved["last_time"]]
    return pa.table(columns, schema=HISTORY_SCHEMA)
