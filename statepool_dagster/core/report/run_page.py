"""One run's page of the report, ``report/runs/<run>.html``: its three charts, its rejects
and the files it passed over."""

from __future__ import annotations

from html import escape

from ..words import plural
from . import svg
from .numbers import RunNumbers, RunRow

RUNS_FOLDER = "runs"

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.row { display: flex; flex-wrap: wrap; gap: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6em .9em; margin: .8em 0; }
figure { margin: 0; } figcaption { font-size: .9em; color: #555; }
svg .tick, svg .axis { font-size: 10px; fill: #555; }
svg .tick { text-anchor: middle; }
.legend span { display: inline-block; width: .8em; height: .8em; margin: 0 .3em 0 .8em; }
ul.problems li { color: #8a4b00; }
"""


def figure(caption: str, chart: str) -> str:
    return f"<figure>{chart}<figcaption>{escape(caption)}</figcaption></figure>"


def _legend() -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span style="background:{color}"></span>{kind}' for kind, color in svg.COLORS.items()
        )
        + "</div>"
    )


def run_card(run: RunNumbers, problems: list[str]) -> str:
    """The run's charts and lists, as one ``<section>``."""
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
        f"<p>{plural(run.states, 'state')}{split}; "
        f"{plural(sum(run.episodes.values()), 'episode')}; "
        f"{plural(len(run.rejects), 'reject')}; {plural(len(run.ignored), 'ignored file')}</p>",
        '<div class="row">',
        figure("accuracy by library version (share of episodes correct)", accuracy),
        figure("cards per snapshot version", cards),
        figure("reference ops per checkpoint, by kind", ops),
        "</div>",
        _legend(),
    ]
    if problems:
        items = "".join(f"<li>{escape(p)}</li>" for p in problems)
        parts.append(f'<h2>Export problems</h2><ul class="problems">{items}</ul>')
    if run.rejects:
        items = "".join(f"<li>{escape(r)}</li>" for r in run.rejects[:50])
        more = f"<li>… {len(run.rejects) - 50} more</li>" if len(run.rejects) > 50 else ""
        parts.append(
            "<details open><summary>rejects</summary>"
            f'<ul class="rejects">{items}{more}</ul></details>'
        )
    if run.ignored:
        items = "".join(
            f"<li><code>{escape(f)}</code>: {escape(why)}</li>" for f, why in run.ignored.items()
        )
        parts.append(
            "<details open><summary>ignored files</summary>"
            f'<ul class="ignored">{items}</ul></details>'
        )
    parts.append("</section>")
    return "".join(parts)


def render_run_page(run: RunNumbers, row: RunRow) -> str:
    """A run's page (no script, no external resource); links back to the overview."""
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                f"<title>statepool report: {escape(run.run)}</title>",
                f"<style>{STYLE}</style></head><body>",
                '<p><a href="../index.html">← all runs</a></p>',
                f"<h1>Run {escape(run.run)}</h1>",
                run_card(run, row.problems),
                "</body></html>",
            ]
        )
        + "\n"
    )
