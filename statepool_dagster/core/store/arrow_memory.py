"""Arrow's memory: loaded once before forking, freed blocks handed back, text viewed in place."""

from __future__ import annotations

import pyarrow as pa

LARGE = 16 << 20  # bytes: a cell this large leaves blocks as large behind in Arrow's allocator


def load_arrow() -> None:
    """Load what pyarrow loads on its first array (it imports pandas: ~0.4 s), once.

    Called before forking workers, so they inherit it instead of each loading it.
    """
    pa.array([])


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
    the kernel zeroes, ~1 ms a stage of a small run.
    """
    global _written
    if _written >= RELEASE_AFTER:
        _written = 0
        pa.default_memory_pool().release_unused()


RELEASE_AFTER = 4 << 20
_written = 0


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
