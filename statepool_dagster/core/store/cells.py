"""Texts of a stored column left where Arrow holds them, for a reader that passes them on.

The export reads each state's and each prompt's text from the store and writes it to a
trainer's Parquet file again: made into Python ``str`` and encoded back, tens of megabytes
of text would cross into Python and out for nothing. A :class:`TextCell` is one such text
left in Arrow: it has a length in characters, as a ``str`` has, its UTF-8 bytes are viewed
in place, and ``str()`` makes the text only for a reader that needs it (a tokenizer, a
JSON parse). ``store.columns.column`` copies cells into a new column in Arrow alone.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa


class TextCell:
    """One text of a ``string`` or ``large_string`` column, kept as a one-row slice of it (or,
    once :func:`compact` moved it, of an array of its own)."""

    __slots__ = ("array", "chars")

    def __init__(self, array: pa.Array, chars: int):
        self.array, self.chars = array, chars

    def __len__(self) -> int:
        """Its length in characters (code points), as ``len`` of its ``str``."""
        return self.chars

    def __str__(self) -> str:
        return self.array[0].as_py()

    def utf8(self) -> memoryview:
        """Its UTF-8 bytes, viewed where Arrow holds them (nothing is copied)."""
        _, offsets, data = self.array.buffers()
        code = "q" if pa.types.is_large_string(self.array.type) else "i"
        ends = memoryview(offsets).cast("B").cast(code)
        at = self.array.offset
        return memoryview(data if data is not None else b"")[ends[at] : ends[at + 1]]


def text_cells(column: pa.ChunkedArray) -> list[TextCell | None]:
    """Each text of a text column as a cell (``None`` for a null), in order."""
    import pyarrow.compute as pc  # here: every reader of the store imports this module

    cells: list[TextCell | None] = []
    for chunk in column.chunks:
        lengths = pc.utf8_length(chunk).to_pylist()
        cells += [
            None if chars is None else TextCell(chunk.slice(i, 1), chars)
            for i, chars in enumerate(lengths)
        ]
    return cells


def compact(cells: Iterable[TextCell | None]) -> None:
    """Move ``cells`` (``None`` skipped) into one array of their own: a slice keeps the whole
    column it was cut from, whose other texts can then be freed while these are kept."""
    kept = [cell for cell in cells if cell is not None]
    if kept:
        owned = pa.concat_arrays([cell.array for cell in kept])
        for i, cell in enumerate(kept):
            cell.array = owned.slice(i, 1)


def utf8(text: str | TextCell) -> bytes | memoryview:
    """A text's UTF-8 bytes, whether a ``str`` or a cell."""
    return text.encode("utf-8") if isinstance(text, str) else text.utf8()
