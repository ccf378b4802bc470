"""The pool report: self-contained HTML pages (inline SVG, no network) about the store.

``numbers`` gathers the figures from the store's tables through ``StoreLayout``, a run at
a time; ``page`` draws the overview, ``run_page`` each run's page; ``write_report``
writes ``store/report/index.html`` and ``store/report/runs/<run>.html``.
"""

from .numbers import PoolNumbers, RunNumbers, RunRow, run_numbers
from .page import render_page
from .run_page import RUNS_FOLDER, render_run_page
from .write import REPORT_FOLDER, REPORT_PAGE, report_path, write_report

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
