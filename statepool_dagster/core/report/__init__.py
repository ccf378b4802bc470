"""The pool report: self-contained HTML pages (inline SVG, no network) about the store.

``numbers`` gathers the figures from the store's tables through ``StoreLayout``, a run at
a time; ``page`` draws the overview, ``run_page`` each run's page; ``write_report``
writes ``store/report/index.html`` and ``store/report/runs/<run>.html``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .numbers import PoolNumbers, RunNumbers, RunRow, run_numbers
    from .page import render_page
    from .paths import REPORT_FOLDER, REPORT_PAGE, report_path
    from .run_page import RUNS_FOLDER, render_run_page
    from .write import write_report

# Each name's module, imported on first use: asking where the report is (every sync) must
# not load Arrow and the report's modules.
_MODULES = {
    "PoolNumbers": "numbers",
    "RunNumbers": "numbers",
    "RunRow": "numbers",
    "run_numbers": "numbers",
    "render_page": "page",
    "RUNS_FOLDER": "run_page",
    "render_run_page": "run_page",
    "REPORT_FOLDER": "paths",
    "REPORT_PAGE": "paths",
    "report_path": "paths",
    "write_report": "write",
}
__all__ = [
    "REPORT_FOLDER",
    "REPORT_PAGE",
    "RUNS_FOLDER",
    "PoolNumbers",
    "RunNumbers",
    "RunRow",
    "render_page",
    "render_run_page",
    "report_path",
    "run_numbers",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
