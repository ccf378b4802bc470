"""Each asset's table, built from and read back into the core's types.

Nested data travels as one JSON text column (exactly what the state files hold),
so every row of a table has the same Arrow schema and nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from ..names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from ..runs.episodes import EpisodeLine
from ..runs.json_read import INT64_MAX, INT64_MIN
from ..runs.snapshots import Snapshot
from ..states.models import dumps


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    """A float column's cell; an integer too large for a float leaves it empty (record kept)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _int64(value: Any) -> int | None:
    """An int64 column's cell: an integer in range, else empty (the record keeps the value)."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


EPISODE_COLUMNS = {
    "line": "1-based line in episodes.jsonl",
    "version": "skill_lib_version the episode ran under",
    "id": "episode id",
    "task": "OVO-Bench task code",
    "video": "video path",
    "realtime": "seconds into the stream",
    "question": "question text",
    "gt": "ground-truth answer",
    "response": "the agent's answer",
    "correct": "response matched gt",
    "record": "the full episode as JSON, lossless (as the state files write it)",
}


EPISODE_TYPES = {
    "line": pa.int64(),
    "version": pa.int64(),
    "realtime": pa.float64(),
    "correct": pa.bool_(),
}


def load_arrow() -> None:
    """Load what pyarrow loads on its first array (it imports pandas: ~0.4 s), once.

    Called before forking workers, so they inherit it instead of each loading it.
    """
    pa.array([])


LARGE = 16 << 20  # bytes: a cell this large leaves blocks as large behind in Arrow's allocator


def release_arrow_memory(size: int | None = None) -> None:
    """Hand the memory Arrow freed back to the system (when ``size`` is given: if it is large).

    Arrow's allocator keeps freed blocks for its next allocations; after a huge cell
    was read or written, that would stay counted while Python allocates its own.
    """
    if size is None or size >= LARGE:
        pa.default_memory_pool().release_unused()


def _schema(columns: dict[str, str], types: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([(name, types.get(name, pa.large_string())) for name in columns])


def _table(columns: dict[str, str], types: dict[str, pa.DataType], rows: list[tuple]) -> pa.Table:
    """An Arrow table from row tuples in ``columns``' order; strings are ``large_string``.

    ``rows`` is emptied, and each column's Python values are let go once converted: a
    huge cell is never held in Python and in Arrow for longer than its own column takes.
    """
    values: list = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    rows.clear()
    schema = _schema(columns, types)
    if len(values) != len(schema):
        raise ValueError(f"rows of {len(values)} values for {len(schema)} columns")
    arrays = []
    for i, f in enumerate(schema):
        arrays.append(_array(values[i], f.type))
        values[i] = None
    return pa.Table.from_arrays(arrays, schema=schema)


def _array(values: tuple, type: pa.DataType) -> pa.Array:
    """A column's array (text may be given as UTF-8 ``bytes``).

    One large text is taken in place, not copied; smaller ones are copied into Arrow's
    memory like any other value (the recent-parts cache then holds Arrow's, as always).
    """
    one = values[0] if len(values) == 1 else None
    if isinstance(one, bytes) and len(one) >= LARGE and type == pa.large_string():
        offsets = pa.array([0, len(one)], pa.int64()).buffers()[1]
        return pa.Array.from_buffers(type, 1, [None, offsets, pa.py_buffer(one)])
    return pa.array(values, type=type)


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


def episode_row(e: EpisodeLine) -> tuple:
    r = e.record
    return (
        e.line,
        e.version,
        _text(r.get("id")),
        _text(r.get("task")),
        _text(r.get("video")),
        _number(r.get("realtime")),
        _text(r.get("question")),
        _text(r.get("gt")),
        _text(r.get("response")),
        _flag(r.get("correct")),
        dumps(r),
    )


def episodes_table(rows: list[tuple]) -> pa.Table:
    return _table(EPISODE_COLUMNS, EPISODE_TYPES, rows)


SNAPSHOT_COLUMNS = {
    "version": "version from the file name skills_v<k>.json",
    "file": "snapshot file, relative to the runs folder",
    "declared_version": "the version field inside the file",
    "n_cards": "cards in the library",
    "library": "the library as JSON, embeddings removed (as the state files write it)",
    "file_stamp": "size:mtime_ns of the file it was read from (unchanged files are reused)",
}

SnapshotRow = tuple[int, str, int | None, int, str, str]


def snapshot_row(snapshot: Snapshot, stamp: str = "") -> SnapshotRow:
    declared = snapshot.declared_version
    return (
        snapshot.version,
        snapshot.file,
        _int64(declared),
        len(snapshot.library.get("cards", [])),
        dumps(snapshot.library),
        stamp,
    )


SNAPSHOT_TYPES = {"version": pa.int64(), "declared_version": pa.int64(), "n_cards": pa.int64()}


def snapshots_table(rows: list[SnapshotRow]) -> pa.Table:
    return _table(SNAPSHOT_COLUMNS, SNAPSHOT_TYPES, rows)


STATE_COLUMNS = {
    "state_id": "<run>_ckpt<k>",
    "run": "run folder name",
    "version": "checkpoint k",
    "library_version": "version of the state's library (k; k-1 with pairing pre_curation)",
    "batch_version": "skill_lib_version of the paired episode batch",
    "n_cards": "cards in the library snapshot",
    "n_episodes": "episodes in the batch",
    "state": "the CheckpointState as JSON, exactly as in state_pool/",
    "reference_ops": "JSON: the ops from this library to the run's next one (next_version, ops)",
    "input_key": "digest of everything the state was built from (unchanged inputs are reused)",
}

StateRow = tuple[str, str, int, int, int, int, int, bytes, str | None, str]  # state: UTF-8


STATE_TYPES = {
    name: pa.int64()
    for name in ("version", "library_version", "batch_version", "n_cards", "n_episodes")
}


def states_table(rows: list[StateRow]) -> pa.Table:
    return _table(STATE_COLUMNS, STATE_TYPES, rows)


PROMPT_COLUMNS = {
    "state_id": "<run>_ckpt<k>",
    "run": "run folder name",
    "version": "checkpoint k",
    "prompt": "the curator prompt, rendered as the inference side renders it",
    "prompt_chars": "length of the prompt in characters",
    "reference_ops": "JSON: the ops from this state's library to the run's next one",
    "input_key": "digest of the state and the prompt spec (unchanged inputs are reused)",
    "state_key": "input_key of the state it was rendered from (exports pair on it)",
}


PROMPT_TYPES = {"version": pa.int64(), "prompt_chars": pa.int64()}


def prompts_table(rows: Iterable[tuple[str, str, int, str, str | None, str, str]]) -> pa.Table:
    """Rows of ``(state_id, run, version, prompt, reference_ops_json, input_key, state_key)``."""
    records = [
        (sid, run, version, prompt, len(prompt), ops, key, state_key)
        for sid, run, version, prompt, ops, key, state_key in rows
    ]
    return _table(PROMPT_COLUMNS, PROMPT_TYPES, records)


SCHEMAS = {
    EPISODES: _schema(EPISODE_COLUMNS, EPISODE_TYPES),
    SNAPSHOTS: _schema(SNAPSHOT_COLUMNS, SNAPSHOT_TYPES),
    STATES: _schema(STATE_COLUMNS, STATE_TYPES),
    PROMPTS: _schema(PROMPT_COLUMNS, PROMPT_TYPES),
}
COLUMNS = {
    EPISODES: EPISODE_COLUMNS,
    SNAPSHOTS: SNAPSHOT_COLUMNS,
    STATES: STATE_COLUMNS,
    PROMPTS: PROMPT_COLUMNS,
}

PREVIEW_CELL_CHARS = 200  # a preview cell's text at most: the event log never gets a whole field


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    if len(text) > 2 * PREVIEW_CELL_CHARS:  # not a string column (those are cut in Arrow)
        text = f"{text[:PREVIEW_CELL_CHARS]}… (+{len(text) - PREVIEW_CELL_CHARS} chars)"
    for line_break in ("\r\n", "\r", "\n"):
        text = text.replace(line_break, " ")
    return text.replace("|", "\\|")


def _cut_strings(table: pa.Table) -> pa.Table:
    """String columns cut in Arrow, so a huge cell never becomes a whole Python string."""
    import pyarrow.compute as pc

    limit = PREVIEW_CELL_CHARS
    for i, f in enumerate(table.schema):
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            column = table.column(i)
            sizes = pc.utf8_length(column).to_pylist()
            cuts = pc.utf8_slice_codeunits(column, 0, limit).to_pylist()
            cells = [
                cut if size is None or size <= limit else f"{cut}… (+{size - limit} chars)"
                for cut, size in zip(cuts, sizes, strict=True)
            ]
            table = table.set_column(i, f.name, pa.array(cells, pa.large_string()))
    return table


def markdown_preview(table: pa.Table, columns: list[str], rows: int = 10) -> str:
    """The first ``rows`` rows of ``columns`` as a Markdown table (asset metadata in the UI).

    Each cell is cut to :data:`PREVIEW_CELL_CHARS` characters.
    """
    if not table.num_rows:
        return "_no rows_"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in _cut_strings(table.select(columns).slice(0, rows)).to_pylist():
        lines.append("| " + " | ".join(_cell(row[c]) for c in columns) + " |")
    return "\n".join(lines)


# What ``str.splitlines`` also ends a line at and ``json.dumps`` leaves raw in a string.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def rejects_jsonl(rejects: Iterable[Any], source: str) -> list[str]:
    """One JSON line per reject; a rejected line's own ``\u2028`` or ``\x85`` stays escaped,
    so a reader splitting with ``splitlines`` (not only at ``\n``, as ours do) sees one reject
    per line."""
    return [
        json.dumps({**r.model_dump(), "source": source}, ensure_ascii=False).translate(_LINE_BREAKS)
        for r in rejects
    ]
