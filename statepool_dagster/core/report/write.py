"""Where the report lives in the store, and writing it there atomically."""

from __future__ import annotations

import os

from ..export.rows import ExportOptions, ExportSet
from ..locations import AnyPath
from ..names import REPORT
from ..store.atomic import write_bytes_atomic
from ..store.layout import StoreLayout
from .numbers import pool_numbers
from .page import render_page

REPORT_FOLDER = REPORT
REPORT_PAGE = "index.html"


def report_path(layout: StoreLayout) -> AnyPath:
    """``store/report/index.html``."""
    return layout.root / REPORT_FOLDER / REPORT_PAGE


def write_report(
    store: str | os.PathLike[str],
    options: ExportOptions | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    export: ExportSet | None = None,
    length_limit: int | None = None,
    collect: bool = True,
) -> AnyPath:
    """Write the pool report from the store's files; returns its path (see ``pool_numbers``)."""
    layout = StoreLayout(store)
    numbers = pool_numbers(layout.root, options, runs_dir, export, length_limit, collect)
    path = report_path(layout)
    page = render_page(numbers, str(layout.root))
    # a folder name that is not UTF-8 (`os.fsdecode` keeps its bytes as `\udcff`) shows escaped
    write_bytes_atomic(path, page.encode("utf-8", "backslashreplace"))
    return path
