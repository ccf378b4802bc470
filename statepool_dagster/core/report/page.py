"""The report page: the pool's figures, then one card per run; plain HTML and inline SVG."""

from __future__ import annotations

import datetime as dt
from html import escape

from . import svg
from .numbers import PoolNumbers, RunNumbers

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em .9em; margin: .8em 0; }
figure { margin: 0; } figcaption { font-size: .9em; color: #555; }
svg .tick, svg .axis { font-size: 10px; fill: #555; }
svg .tick { text-anchor: middle; }
.legend span { display: inline-block; width: .8em; height: .8em; margin: 0 .3em 0 .8em; }
table { border-collapse: collapse; } td, th { padding: .15em .6em; text-align: left; }
ul.problems li { color: #8a4b00; }
"""


def _figure(caption: str, chart: str) -> str:
    return f"<figure>{chart}<figcaption>{escape(caption)}</figcaption></figure>"


def _legend() -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span style="background:{color}"></span>{kind}' for kind, color in svg.COLORS.items()
        )
        + "</div>"
    )


def _run_card(run: RunNumbers) -> str:
    accuracy = svg.line_chart(
        list(run.accuracy.items()),
        "accuracy",
        f"{run.run}: accuracy by library version",
        "library version",
        y_max=1.0,
        run=run.run,
    )
    cards = svg.line_chart(
        list(run.cards.items()),
        "cards",
        f"{run.run}: cards per version",
        "snapshot version",
        run=run.run,
    )
    ops = svg.stacked_bars(
        sorted(run.ops.items()),
        "ops",
        f"{run.run}: reference ops per checkpoint",
        "checkpoint",
        run=run.run,
    )
    split = f", split <b>{escape(run.split)}</b>" if run.split else ""
    parts = [
        f'<section class="card" id="run-{escape(run.run)}" data-run="{escape(run.run)}">',
        f"<h3>{escape(run.run)}</h3>",
        f"<p>{run.states} states{split}; {sum(run.episodes.values())} episodes; "
        f"{len(run.rejects)} rejects; {len(run.ignored)} ignored files</p>",
        '<div class="row">',
        _figure("accuracy by library version (share of episodes correct)", accuracy),
        _figure("cards per snapshot version", cards),
        _figure("reference ops per checkpoint, by kind", ops),
        "</div>",
        _legend(),
    ]
    if run.rejects:
        items = "".join(f"<li>{escape(r)}</li>" for r in run.rejects[:50])
        more = f"<li>… {len(run.rejects) - 50} more</li>" if len(run.rejects) > 50 else ""
        parts.append(
            f'<details><summary>rejects</summary><ul class="rejects">{items}{more}</ul></details>'
        )
    if run.ignored:
        items = "".join(
            f"<li><code>{escape(f)}</code>: {escape(why)}</li>" for f, why in run.ignored.items()
        )
        parts.append(
            f'<details><summary>ignored files</summary><ul class="ignored">{items}</ul></details>'
        )
    parts.append("</section>")
    return "".join(parts)


def render_page(numbers: PoolNumbers, store: str, now: dt.datetime | None = None) -> str:
    """The whole report as one HTML document (no script, no external resource)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    limit = numbers.length_limit
    lengths = svg.histogram(
        numbers.prompt_chars,
        "prompt_chars",
        "prompt length distribution",
        "prompt length (characters)",
        limit=limit,
    )
    states = svg.bar_chart(
        [(r.run, r.states) for r in numbers.runs], "states", "states per run", "run"
    )
    splits = svg.bar_chart(
        list(numbers.split_rows.items()), "splits", "rows per export split", "split"
    )
    split_text = ", ".join(
        f"{s}: {numbers.split_rows[s]} rows from {numbers.split_runs.get(s, 0)} runs"
        for s in numbers.split_rows
    )
    problems = "".join(f"<li>{escape(p)}</li>" for p in numbers.problems)
    limit_text = f" (dashed line: the export's limit, {limit})" if limit is not None else ""
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>statepool report: {escape(store)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>State pool report</h1>",
        f"<p>Store <code>{escape(store)}</code>, written {now.isoformat(timespec='seconds')}: "
        f"{len(numbers.runs)} runs, {sum(r.states for r in numbers.runs)} states, "
        f"{len(numbers.prompt_chars)} prompts.</p>",
        "<h2>The pool</h2>",
        '<div class="row">',
        _figure(f"prompt length distribution{limit_text}", lengths),
        _figure("states per run", states),
        _figure(f"export splits, from {numbers.splits_from}: {split_text}", splits),
        "</div>",
    ]
    if problems:
        body.append(
            f"<h2>Export problems ({escape(numbers.splits_from)})</h2>"
            f'<ul class="problems">{problems}</ul>'
        )
    body.append("<h2>Runs</h2>")
    body += [_run_card(run) for run in numbers.runs]
    body.append("</body></html>")
    return "\n".join(body) + "\n"
