"""A run's table, read by anyone: exports, readers, checks, the IO manager.

Readers take no lock. A save may remove a part (pruned or merged) between a reader's
listing and its read; the part's rows are then already in a newer part, so the table is
read again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa

from ..locations import AnyPath
from .layout import StoreLayout
from .part_files import READ_ATTEMPTS
from .parts import RunTable

T = TypeVar("T")


def _retried(folder: AnyPath, schema: pa.Schema, read: Callable[[RunTable], T]) -> T:
    """``read`` of the run table in ``folder``, again if a part went meanwhile."""
    for attempt in range(READ_ATTEMPTS):
        table = None
        try:
            table = RunTable(folder, schema)
            return read(table)
        except FileNotFoundError:
            if attempt == READ_ATTEMPTS - 1:
                raise
        finally:
            if table is not None:
                table.close()
    raise AssertionError("unreachable")


def read_table(folder: AnyPath, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """A run table's current rows as one table, in checkpoint order (read again if a part
    went meanwhile)."""
    return _retried(folder, schema, lambda table: table.read(columns))


def read_run_infos(layout: StoreLayout, asset: str, run: str) -> list[tuple[str, dict[str, Any]]]:
    """Each checkpoint of one run's table of ``asset`` with its small facts (``info``), in
    checkpoint order: from the table's index, its rows unread (a footer where the index
    is behind a part)."""
    from .schemas import SCHEMAS

    return _retried(
        layout.table(asset, run),
        SCHEMAS[asset],
        lambda table: [(name, table.parts[name].info) for name in table.names()],
    )


def read_run_table(
    layout: StoreLayout, asset: str, run: str, columns: list[str] | None = None
) -> pa.Table:
    """One run's table of ``asset`` from the store, as one Arrow table (empty if never built)."""
    from .schemas import SCHEMAS

    return read_table(layout.table(asset, run), SCHEMAS[asset], columns)
