"""The rewards recorded for each state, read from the feedback segments themselves.

The fold (:mod:`.stats`) keeps running figures and no step range; a question such as "what
did the trainer reward up to step n" is answered from the records, read once, a line at a
time: memory holds one small tally per state kept, never the records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..locations import AnyPath
from ..segments import iter_segment_lines, list_segments
from ..segments.reader import OversizeLine
from .records import BadRecord, FeedbackRecord, decode


@dataclass(slots=True)
class Recorded:
    """One state's records kept: how many, their mean score, the steps they span."""

    count: int = 0
    mean: float = 0.0
    first_step: int | None = None
    last_step: int | None = None

    def add(self, record: FeedbackRecord) -> None:
        self.count += 1
        self.mean += (record.score - self.mean) / self.count
        step = record.step
        if step is not None:
            self.first_step = step if self.first_step is None else min(self.first_step, step)
            self.last_step = step if self.last_step is None else max(self.last_step, step)


@dataclass
class RecordedRewards:
    """Each kept state's records, and what was read and left out."""

    folder: str
    states: dict[str, Recorded] = field(default_factory=dict)
    segments: int = 0
    records: int = 0  # every record read
    kept: int = 0
    bad_lines: int = 0
    left_out: dict[str, int] = field(default_factory=dict)  # why -> records


# Why a record is left out, or None to keep it.
Keep = Callable[[FeedbackRecord], str | None]


def recorded_rewards(folder: str | os.PathLike[str] | AnyPath, keep: Keep) -> RecordedRewards:
    """Tally the records of every sealed segment in ``folder`` that ``keep`` keeps (it returns
    ``None``) per state; those it leaves out are counted under the reason it gives."""
    read = RecordedRewards(str(folder))
    for segment in list_segments(folder):
        read.segments += 1
        for _, line in iter_segment_lines(segment.path):
            record = None if isinstance(line, OversizeLine) else decode(line)
            if record is None or isinstance(record, BadRecord):
                read.bad_lines += 1
                continue
            read.records += 1
            why = keep(record)
            if why is not None:
                read.left_out[why] = read.left_out.get(why, 0) + 1
                continue
            read.kept += 1
            tally = read.states.get(record.state_id)
            if tally is None:
                tally = read.states[record.state_id] = Recorded()
            tally.add(record)
    return read
