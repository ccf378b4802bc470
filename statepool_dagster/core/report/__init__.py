"""The pool report: one self-contained HTML page (inline SVG, no network) about the store.

``pool_numbers`` gathers the figures from the store's tables through ``StoreLayout``;
``render_page`` draws them; ``write_report`` writes ``store/report/index.html``.
"""

from .numbers import PoolNumbers, RunNumbers, pool_numbers
from .page import render_page
from .write import REPORT_FOLDER, REPORT_PAGE, report_path, write_report

__all__ = [
    "REPORT_FOLDER",
    "REPORT_PAGE",
    "PoolNumbers",
    "RunNumbers",
    "pool_numbers",
    "render_page",
    "report_path",
    "write_report",
]
