"""The last steps of every exported row, whatever its source: selection, length, position."""

from __future__ import annotations

import dataclasses

from ..feedback.select import Selection
from .lengths import LengthFilter
from .rows import ExportRow, ExportSet


class Gate:
    """Leaves out what the selection or the length limit rejects; numbers and counts the rest.

    Each state left out by the selection is named, with its reason, in the problems.
    """

    def __init__(
        self, export: ExportSet, lengths: LengthFilter | None, selection: Selection | None
    ):
        self.export, self.lengths = export, lengths
        self.selection = selection if selection is not None and selection.options.active else None
        self.index: dict[str, int] = {}

    def admit(self, row: ExportRow) -> ExportRow | None:
        """``row`` as written (weighed, measured), or ``None`` when it is left out."""
        if self.selection is not None:
            decision = self.selection.decide(row.state_id)
            if not decision.keep:
                self.export.problems.append(f"state {row.state_id} left out: {decision.reason}")
                return None
            if decision.weight is not None:
                row = dataclasses.replace(row, weight=decision.weight)
        if self.lengths is not None:
            measured = self.lengths.measure(row)
            if measured is None:
                return None
            row = measured
        self.index[row.split] = row.index + 1
        self.export.add(row)
        return row

    def finish(self) -> None:
        if self.lengths is not None:
            self.export.problems.extend(self.lengths.problems)
            self.export.prompt_lengths = self.lengths.summary()
