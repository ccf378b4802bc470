"""The report's overview, ``report/index.html``: the pool's figures, then one table line per run.

The table stays readable at thousands of runs: runs with problems come first, each line
has small inline curves, and any column sorts on a click (a few lines of inline script;
nothing is fetched). Each run's charts are on its own page, linked from its name.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from urllib.parse import quote

from ..words import plural
from . import svg
from .numbers import PoolNumbers, RunRow
from .run_page import RUNS_FOLDER, figure

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; } figcaption { font-size: .9em; color: #555; }
svg .tick, svg .axis { font-size: 10px; fill: #555; }
svg .tick { text-anchor: middle; }
table.runs { border-collapse: collapse; font-size: 13px; }
table.runs th, table.runs td { padding: .15em .5em; text-align: left; white-space: nowrap; }
table.runs th { cursor: pointer; position: sticky; top: 0; background: #f4f4f4; }
table.runs th[aria-sort="ascending"]::after { content: " ▲"; }
table.runs th[aria-sort="descending"]::after { content: " ▼"; }
table.runs td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.runs svg { vertical-align: middle; }
table.runs tr.flagged td:first-child { border-left: 3px solid #c62828; }
table.runs tbody tr:nth-child(even) { background: #fafafa; }
ul.problems li { color: #8a4b00; }
.bad { color: #c62828; font-weight: 600; }
"""

# Sorts the runs table by the clicked column's data-sort values (numbers when they parse).
SCRIPT = """
document.querySelectorAll("table.runs th").forEach((th, col) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0];
  const down = th.getAttribute("aria-sort") === "ascending";
  th.parentNode.querySelectorAll("th").forEach(h => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", down ? "descending" : "ascending");
  const key = tr => tr.cells[col].dataset.sort;
  const rows = Array.from(body.rows);
  const numeric = rows.every(tr => key(tr) === "" || !isNaN(Number(key(tr))));
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const c = numeric ? Number(x) - Number(y) : x.localeCompare(y, undefined, {numeric: true});
    return down ? -c : c;
  });
  body.append(...rows);
}));
"""

COLUMNS = (
    "run",
    "problems",
    "split",
    "states",
    "episodes",
    "accuracy",
    "cards",
    "add",
    "update",
    "delete",
    "rejects",
    "ignored",
)
SHOWN_PROBLEMS = 20


def _cell(text: str, sort: object, numeric: bool = False) -> str:
    cls = ' class="n"' if numeric else ""
    return f'<td{cls} data-sort="{escape(str(sort))}">{text}</td>'


def _last(points: list[tuple[int, float]]) -> float | None:
    return points[-1][1] if points else None


def _run_line(row: RunRow, top_states: int) -> str:
    run = escape(row.run)
    link = f'<a href="{RUNS_FOLDER}/{quote(row.run)}.html">{run}</a>'
    problems = len(row.problems) + row.rejects + row.ignored
    accuracy, cards = _last(row.accuracy), _last(row.cards)
    accuracy_text = f"{accuracy:.2f}" if accuracy is not None else "–"
    cards_text = f"{cards:.0f}" if cards is not None else "–"
    flagged = ' class="flagged"' if row.flagged else ""
    cells = [
        _cell(link, row.run),
        _cell(f'<span class="bad">{problems}</span>' if problems else "0", problems, True),
        _cell(escape(row.split or "–"), row.split or ""),
        _cell(
            f"{row.states} " + svg.inline_bar(row.run, row.states, top_states, "states"),
            row.states,
            True,
        ),
        _cell(str(row.episodes), row.episodes, True),
        _cell(
            svg.sparkline(row.accuracy, "accuracy-spark", "accuracy", 1.0, run=row.run)
            + f" {accuracy_text}",
            "" if accuracy is None else accuracy,
            True,
        ),
        _cell(
            svg.sparkline(row.cards, "cards-spark", "cards", run=row.run) + f" {cards_text}",
            "" if cards is None else cards,
            True,
        ),
        *(_cell(str(row.ops[k]), row.ops[k], True) for k in ("add", "update", "delete")),
        _cell(str(row.rejects), row.rejects, True),
        _cell(str(row.ignored), row.ignored, True),
    ]
    return f'<tr data-run="{run}"{flagged}>' + "".join(cells) + "</tr>"


def runs_table(runs: list[RunRow]) -> str:
    """Every run, those with problems first (then in the store's order)."""
    ordered = sorted(enumerate(runs), key=lambda item: (not item[1].flagged, item[0]))
    top = max((r.states for r in runs), default=0)
    head = "".join(f'<th scope="col">{c}</th>' for c in COLUMNS)
    lines = [_run_line(row, top) for _, row in ordered]
    return (
        f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>'
        + "\n".join(lines)
        + "</tbody></table>"
    )


def _problems(numbers: PoolNumbers) -> str:
    if not numbers.problems:
        return ""
    items = [f"<li>{escape(p)}</li>" for p in numbers.problems]
    shown = "".join(items[:SHOWN_PROBLEMS])
    rest = ""
    if len(items) > SHOWN_PROBLEMS:
        rest = (
            f"<details><summary>{len(items) - SHOWN_PROBLEMS} more</summary>"
            f'<ul class="problems">{"".join(items[SHOWN_PROBLEMS:])}</ul></details>'
        )
    return (
        f"<h2>Export problems ({escape(numbers.splits_from)})</h2>"
        f'<ul class="problems">{shown}</ul>{rest}'
    )


def render_page(
    numbers: PoolNumbers, store: str, now: dt.datetime | None = None, sections: tuple[str, ...] = ()
) -> str:
    """The overview as one HTML document (inline style and script, no external resource).

    ``sections`` (sessions, feedback) go after the runs table.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    limit = numbers.length_limit
    lengths = svg.histogram(
        numbers.prompt_chars,
        "prompt_chars",
        "prompt length distribution",
        "prompt length (characters)",
        limit=limit,
    )
    splits = svg.bar_chart(
        list(numbers.split_rows.items()), "splits", "rows per export split", "split"
    )
    split_text = ", ".join(
        f"{s}: {plural(numbers.split_rows[s], 'row')} from "
        f"{plural(numbers.split_runs.get(s, 0), 'run')}"
        for s in numbers.split_rows
    )
    limit_text = f" (dashed line: the export's limit, {limit})" if limit is not None else ""
    flagged = sum(1 for r in numbers.runs if r.flagged)
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>statepool report: {escape(store)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>State pool report</h1>",
        f"<p>Store <code>{escape(store)}</code>, written {now.isoformat(timespec='seconds')}: "
        f"{plural(len(numbers.runs), 'run')}, "
        f"{plural(sum(r.states for r in numbers.runs), 'state')}, "
        f"{plural(len(numbers.prompt_chars), 'prompt')}; "
        f"{plural(flagged, 'run')} with problems.</p>",
        "<h2>The pool</h2>",
        '<div class="row">',
        figure(f"prompt length distribution{limit_text}", lengths),
        figure(f"export splits, from {numbers.splits_from}: {split_text}", splits),
        "</div>",
        _problems(numbers),
        "<h2>Runs</h2>",
        "<p>Runs with rejected lines, ignored files or export problems first; click a "
        "column to sort, a run for its charts.</p>",
        runs_table(numbers.runs),
        *sections,
        f"<script>{SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(b for b in body if b) + "\n"
