"""What the build stages share: a run's folder, its open tables, a stage's report, the
digests that key what a stage can reuse."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..locations import AnyPath, as_path
from ..names import SNAPSHOTS, check_run_name
from ..rejects import Reject
from ..runs.files import READER_VERSION
from ..states.models import BytesLike
from ..store.layout import StoreLayout
from ..store.parts import RunTable
from ..store.schemas import SCHEMAS

# Bump when what a stage writes for the same inputs changes: its parts are rebuilt.
# 3: per-checkpoint parts; 4: checkpoint names sort as int64 versions. With the readers' rules.
TABLE_FORMAT = f"4.{READER_VERSION}"
STATE_VERSION = "1"  # join.py / models.py: what a state looks like
RENDER_VERSION = "1"  # render.py: what a prompt looks like


@dataclass
class StageReport:
    """What a stage did for one run: plain numbers, JSON values, Markdown, notes."""

    run: str
    fingerprint: str
    rows: int
    values: dict[str, int | float | str] = field(default_factory=dict)
    json: dict[str, Any] = field(default_factory=dict)
    markdown: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reused: int = 0


def run_folder(settings: Settings, run: str) -> AnyPath:
    """The folder of run ``run`` under the settings' runs folder (its name checked first)."""
    return as_path(settings.runs_dir) / check_run_name(run)


class OpenTables:
    """The run tables one build has open, by asset and run: a stage gets the table the stage
    before it saved, while it is unchanged on disk. The step runner makes one per run it
    builds, under that run's lock; never sent to a worker."""

    def __init__(self, layout: StoreLayout) -> None:
        self.layout = layout
        self._open: dict[tuple[str, str], RunTable] = {}

    def open(self, asset: str, run: str) -> RunTable:
        """Run ``run``'s table of ``asset``, loaded unless the one kept is unchanged."""
        table = self._open.get((asset, run))
        if table is None or not table.unchanged():
            apart = asset != SNAPSHOTS  # a snapshot's part changes only with its file
            table = RunTable(self.layout.table(asset, run), SCHEMAS[asset], apart)
            self._open[asset, run] = table
        return table


def digest(*parts: str) -> str:
    """A short, stable digest of text parts (keys of the parts a stage can reuse).

    The same value as ``digest_pieces`` of each part's UTF-8, in one update.
    """
    text = "\0".join(parts) + "\0" if parts else ""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def digest_pieces(parts: Iterable[Sequence[BytesLike]]) -> str:
    """:func:`digest` of parts already in UTF-8, each given as pieces hashed one after another.

    Same value as ``digest`` of the joined texts, without joining (or copying) them.
    """
    h = hashlib.blake2b(digest_size=16)
    for pieces in parts:
        for piece in pieces:
            h.update(piece)
        h.update(b"\0")
    return h.hexdigest()


def combined(*fingerprints: str) -> str:
    """One fingerprint if the inputs agree; otherwise a value no run's files can match."""
    unique = set(fingerprints)
    return unique.pop() if len(unique) == 1 else "mixed:" + "+".join(fingerprints)


def reject_lines(rejects: list[Reject]) -> str:
    return "\n".join(f"- {r.describe()}" for r in rejects[:50])


def round3(x: float) -> float:
    """Three decimals as numpy rounds them (``x * 1000`` to even), as the UI always showed."""
    return round(x * 1000) / 1000
