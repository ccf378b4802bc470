"""Each asset's row, named, and the Arrow table a list of them becomes.

A row is a ``NamedTuple`` whose fields are its table's columns, in order: read by
name, yet as cheap to build and to turn into columns as a plain tuple. A record's value
that a flat column cannot hold leaves its cell empty; the record itself is always kept
whole (its JSON column), so nothing is lost.

Arrow's memory is handled here too: loaded once before forking, freed blocks handed back,
text viewed in place. The columns are made from their buffers (``columns.py``): no pandas.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa

from ..names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from ..runs.episodes import EpisodeLine
from ..runs.json_read import INT64_MAX, INT64_MIN
from ..runs.snapshots import Snapshot
from ..states.models import dumps
from .columns import LARGE, column
from .schemas import SCHEMAS


def text_cell(value: Any) -> str | None:
    return None if value is None else str(value)


def float_cell(value: Any) -> float | None:
    """A float column's cell; an integer too large for a float leaves it empty."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def int64_cell(value: Any) -> int | None:
    """An int64 column's cell: an integer in range, else empty."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def flag_cell(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


class EpisodeRow(NamedTuple):
    line: int
    version: int
    id: str | None
    task: str | None
    video: str | None
    realtime: float | None
    question: str | None
    gt: str | None
    response: str | None
    correct: bool | None
    record: str


class SnapshotRow(NamedTuple):
    version: int
    file: str
    declared_version: int | None
    n_cards: int
    library: str | bytes  # text, or its UTF-8 (taken into Arrow as it is)
    file_stamp: str


class StateRow(NamedTuple):
    state_id: str
    run: str
    version: int
    library_version: int
    batch_version: int
    n_cards: int
    n_episodes: int
    state: bytes  # UTF-8, taken into Arrow as it is: a state is held once, however large
    reference_ops: str | None
    input_key: str


class PromptRow(NamedTuple):
    state_id: str
    run: str
    version: int
    prompt: str
    prompt_chars: int
    reference_ops: str | None
    input_key: str
    state_key: str


ROWS = {EPISODES: EpisodeRow, SNAPSHOTS: SnapshotRow, STATES: StateRow, PROMPTS: PromptRow}


def episode_row(e: EpisodeLine) -> EpisodeRow:
    r = e.record
    return EpisodeRow(
        e.line,
        e.version,
        text_cell(r.get("id")),
        text_cell(r.get("task")),
        text_cell(r.get("video")),
        float_cell(r.get("realtime")),
        text_cell(r.get("question")),
        text_cell(r.get("gt")),
        text_cell(r.get("response")),
        flag_cell(r.get("correct")),
        dumps(r),
    )


def snapshot_row(snapshot: Snapshot, stamp: str = "") -> SnapshotRow:
    return SnapshotRow(
        snapshot.version,
        snapshot.file,
        int64_cell(snapshot.declared_version),
        len(snapshot.library.get("cards", [])),
        dumps(snapshot.library),
        stamp,
    )


def rows_table(schema: pa.Schema, rows: list) -> pa.Table:
    """An Arrow table from rows in ``schema``'s column order.

    ``rows`` is emptied, and each column's Python values are let go once converted: a
    huge cell is never held in Python and in Arrow for longer than its own column takes.
    """
    values: list = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    rows.clear()
    if len(values) != len(schema):
        raise ValueError(f"rows of {len(values)} values for {len(schema)} columns")
    arrays = []
    for i, f in enumerate(schema):
        arrays.append(column(values[i], f.type))
        values[i] = None
    return pa.Table.from_arrays(arrays, schema=schema)


def episodes_table(rows: list[EpisodeRow]) -> pa.Table:
    return rows_table(SCHEMAS[EPISODES], rows)


RELEASE_AFTER = 4 << 20  # bytes written between two hand-backs of Arrow's freed memory
_written = 0


def load_arrow() -> None:
    """Load the parts of pyarrow a build uses (Parquet, compute), once.

    Called before forking workers, so they inherit them instead of each loading them.
    """
    import pyarrow.compute
    import pyarrow.parquet  # noqa: F401


def release_arrow_memory(size: int | None = None) -> None:
    """Hand the memory Arrow freed back to the system (when ``size`` is given: if it is large).

    Arrow's allocator keeps freed blocks for its next allocations; after a huge cell
    was read or written, that would stay counted while Python allocates its own.
    """
    if size is None or size >= LARGE:
        pa.default_memory_pool().release_unused()


def note_written(size: int) -> None:
    """Count ``size`` bytes of table data written (what :func:`release_if_large` goes by)."""
    global _written
    _written += size


def release_if_large() -> None:
    """:func:`release_arrow_memory` once Arrow may hold enough freed memory to matter: after
    :data:`RELEASE_AFTER` bytes written since the last time. (A large cell read or written
    is handed back where it is met, by ``release_arrow_memory(size)``; the pool's peak
    cannot tell, as releasing never lowers it.)

    Handing memory back is not free: the allocator's next block is then a fresh (huge) page
    the kernel zeroes.
    """
    global _written
    if _written >= RELEASE_AFTER:
        _written = 0
        pa.default_memory_pool().release_unused()


def utf8_views(column: pa.ChunkedArray) -> list[memoryview]:
    """Each text of a ``large_string`` column as UTF-8, viewed where Arrow holds it.

    Nothing is copied (a scalar of the column would copy its value); a null is empty.
    """
    views = []
    for chunk in column.chunks:
        _, offsets, data = chunk.buffers()
        ends = memoryview(offsets).cast("B").cast("q")
        text = memoryview(data if data is not None else b"")
        first = chunk.offset
        views += [text[ends[i] : ends[i + 1]] for i in range(first, first + len(chunk))]
    return views
