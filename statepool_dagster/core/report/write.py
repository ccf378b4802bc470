"""Where the report lives in the store, and writing it there a run at a time.

``store/report/index.html`` is the pool's overview; ``store/report/runs/<run>.html`` each
run's detail; ``store/report/states/`` each state's page (:mod:`.state_pages`). Runs are
read one after another: a run's page is written as soon as its figures are counted (or
taken from ``cache.py`` when its files have not changed; a page drawn from what the last
report's was drawn from is that page, hard-linked), and only its line of the
overview (counts and sampled curves) is kept, so memory follows the largest run, not the
pool. The run pages are swapped in as one folder, the state pages as another, then the
overview that links them.
"""

from __future__ import annotations

import os
from array import array

from ..export.folder import StagedFolder
from ..export.rows import ExportOptions, ExportSet
from ..locations import AnyPath
from ..store.atomic import write_bytes_atomic
from ..store.layout import StoreLayout
from .cache import counted_run, keep_page_keys, kept_page_keys, page_key, prune_figures
from .extras import feedback_numbers, feedback_section, session_rows, sessions_section
from .numbers import (
    PoolNumbers,
    RunRow,
    export_summary,
    ignored_files,
    run_problems,
    runs_root_of,
    store_runs,
)
from .page import render_page
from .paths import KEPT_PROMPTS, REPORT_FOLDER, STATES_FOLDER, report_path
from .run_page import RUNS_FOLDER, render_run_page
from .state_html import encode_page, states_section
from .state_pages import kept_pages, pages_stamp, patch_state_pages, write_state_pages


def write_report(
    store: str | os.PathLike[str],
    options: ExportOptions | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    export: ExportSet | None = None,
    length_limit: int | None = None,
    collect: bool = True,
) -> AnyPath:
    """Write the pool report from the store's files; returns the overview's path.

    The splits are ``export``'s when given; else the store is tallied as an export would
    be (``collect``), or, to stay cheap after a sync, taken from the last export's manifest.
    """
    layout = StoreLayout(store)
    summary, splits_from = export_summary(layout, options, export, collect)
    runs_root = runs_root_of(runs_dir)
    split_of_run = {run: split for split, runs in summary["runs"].items() for run in runs}
    names = store_runs(layout)
    problems = run_problems(list(summary["problems"]), names)
    numbers = PoolNumbers(
        runs=[],
        prompt_chars=array("q"),
        split_rows=dict(summary["rows"]),
        split_runs={s: len(r) for s, r in summary["runs"].items()},
        problems=list(summary["problems"]),
        splits_from=splits_from,
        length_limit=length_limit,
    )
    drawn = layout.root / REPORT_FOLDER / RUNS_FOLDER
    pages, keys = StagedFolder(drawn), {}
    kept_keys = kept_page_keys(drawn) if layout.local else {}  # elsewhere no page is kept
    try:
        for run in names:
            figures, chars, stamp = counted_run(layout, run)
            figures.ignored = ignored_files(runs_root, run)
            figures.split = split_of_run.get(run)
            row = RunRow.of(figures, problems.get(run, []))
            page, key = f"{run}.html", page_key(stamp, figures, row.problems)
            if key is None or kept_keys.get(run) != key or not pages.keep(page):
                (pages.path / page).write_bytes(encode_page(render_run_page(figures, row)))
            if key is not None:
                keys[run] = key
            numbers.runs.append(row)
            numbers.prompt_chars.extend(chars)
            del figures, chars
        if keys:
            keep_page_keys(pages.path, keys)
        pages.commit()
    finally:
        pages.discard()
    prune_figures(layout, names)
    final = layout.root / REPORT_FOLDER / STATES_FOLDER
    stamp = pages_stamp(layout)
    states = kept_pages(final, stamp)
    if states is None:  # read again only when a prompt table, the fold or a version changed
        pages = StagedFolder(final)
        try:
            kept = layout.root / REPORT_FOLDER / KEPT_PROMPTS
            if stamp is not None:  # a few runs changed: their states' shards alone
                states = patch_state_pages(layout, pages, stamp, kept)
            if states is None:
                pages.discard()
                pages = StagedFolder(final)
                states = write_state_pages(layout, pages.path, stamp, kept)
            pages.commit()
        finally:
            pages.discard()
    sections = (
        sessions_section(session_rows(layout.root)),
        feedback_section(feedback_numbers(layout.root)),
        states_section(states),
    )
    path = report_path(layout)
    write_bytes_atomic(path, encode_page(render_page(numbers, str(layout.root), sections=sections)))
    return path
