"""Where the report lives in the store (asked by every sync, so nothing heavy imported)."""

from __future__ import annotations

from ..locations import AnyPath
from ..names import REPORT
from ..store.layout import StoreLayout

REPORT_FOLDER = REPORT
REPORT_PAGE = "index.html"


def report_path(layout: StoreLayout) -> AnyPath:
    """``store/report/index.html``."""
    return layout.root / REPORT_FOLDER / REPORT_PAGE


STATES_FOLDER = "states"
SEARCH_PAGE = "index.html"
# Each run's shown prompts, kept between reports (hidden: not a page of the site).
KEPT_PROMPTS = ".state-prompts"
# What each run page was drawn from (in the run pages' folder, swapped in with them), so a
# report keeps the pages of runs that did not change.
RUN_PAGE_KEYS = ".page-keys.json"


def state_pages_path(layout: StoreLayout) -> AnyPath:
    """``store/report/states/index.html``: the page that finds a state's page by its id."""
    return layout.root / REPORT_FOLDER / STATES_FOLDER / SEARCH_PAGE
