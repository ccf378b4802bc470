"""A table's first rows as Markdown, each cell cut short (asset metadata in the UI)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from .rows import utf8_views

PREVIEW_CELL_CHARS = 200  # a preview cell's text at most: the event log never gets a whole field
# Per-version maps in a materialization's metadata cover the newest versions only, so what
# Dagster stores (and serialises) for a new checkpoint does not grow with the run.
RECENT_VERSIONS = 50


def recent(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The facts of the newest ``RECENT_VERSIONS`` checkpoints (``infos`` in version order)."""
    return infos[-RECENT_VERSIONS:]


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
            if pa.types.is_large_string(f.type) and all(
                len(cell) <= limit for cell in utf8_views(column)
            ):
                continue  # no cell longer (in bytes, so in characters): nothing to cut
            sizes = pc.utf8_length(column).to_pylist()
            cuts = pc.utf8_slice_codeunits(column, 0, limit).to_pylist()
            cells = [
                cut if size is None or size <= limit else f"{cut}… (+{size - limit} chars)"
                for cut, size in zip(cuts, sizes, strict=True)
            ]
            table = table.set_column(i, f.name, pa.array(cells, pa.large_string()))
    return table


def _cut_text(text: str) -> str:
    """A text cell cut as :func:`_cut_strings` cuts it in Arrow."""
    size, limit = len(text), PREVIEW_CELL_CHARS
    return text if size <= limit else f"{text[:limit]}… (+{size - limit} chars)"


def markdown_preview(table: pa.Table, columns: list[str], rows: int = 10) -> str:
    """The first ``rows`` rows of ``columns`` as a Markdown table.

    Each cell is cut to :data:`PREVIEW_CELL_CHARS` characters.
    """
    cut = _cut_strings(table.select(columns).slice(0, rows))
    return _markdown(columns, zip(*(cut[c].to_pylist() for c in columns), strict=True))


def markdown_rows(columns: list[str], rows: Sequence[Sequence[Any]]) -> str:
    """:func:`markdown_preview` of rows not yet in Arrow: each a tuple of the values of
    ``columns`` as Arrow would give them back (text as ``str``)."""
    cut = _cut_text
    return _markdown(columns, ([cut(v) if isinstance(v, str) else v for v in row] for row in rows))


def _markdown(columns: list[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(value) for value in row) + " |")
    return "\n".join(lines) if len(lines) > 2 else "_no rows_"
