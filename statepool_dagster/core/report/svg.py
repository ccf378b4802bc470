"""Small inline SVG charts: no plotting library, no script, nothing fetched.

Every mark carries its value in ``data-*`` attributes and a ``<title>`` tooltip, so a
reader (and the browser test) can check a chart against the store's numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 360, 180
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 14, 30
COLORS = {"add": "#2e7d32", "update": "#1565c0", "delete": "#c62828"}
LINE = "#5e35b1"
BAR = "#00838f"


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _frame(
    chart: str, label: str, body: list[str], y_max: float, x_title: str, y_min: float = 0, **data
) -> str:
    attrs = "".join(f' data-{k}="{escape(str(v))}"' for k, v in data.items())
    plot_h = HEIGHT - TOP - BOTTOM
    axis = [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" '
        f'y2="{HEIGHT - BOTTOM}" stroke="#888"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end" class="tick">{_fmt(y_max)}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" class="tick">'
        f"{_fmt(y_min)}</text>",
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 4}" text-anchor="middle" '
        f'class="axis">{escape(x_title)}</text>',
    ]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(label)}" '
        f'data-chart="{escape(chart)}"{attrs}>' + "".join(axis + body) + "</svg>"
    )


def _empty(chart: str, label: str, **data) -> str:
    body = [f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no data</text>']
    return _frame(chart, label, body, 0, "", **data)


def _x_positions(n: int) -> list[float]:
    span = WIDTH - LEFT - RIGHT
    return [LEFT + span * (i + 0.5) / n for i in range(n)]


def _y(value: float, y_max: float) -> float:
    plot_h = HEIGHT - TOP - BOTTOM
    return HEIGHT - BOTTOM - (plot_h * value / y_max if y_max else 0)


def line_chart(
    points: Sequence[tuple[int, float]],
    chart: str,
    label: str,
    x_title: str,
    y_max: float | None = None,
    **data,
) -> str:
    """Values over integer x (versions), one circle per point, joined by a line."""
    if not points:
        return _empty(chart, label, **data)
    top = y_max if y_max is not None else max(v for _, v in points) or 1
    xs = _x_positions(len(points))
    coords = [(x, _y(v, top)) for x, (_, v) in zip(xs, points, strict=True)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    body = [f'<polyline points="{path}" fill="none" stroke="{LINE}" stroke-width="2"/>']
    for (x, y), (k, v) in zip(coords, points, strict=True):
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{LINE}" class="mark" '
            f'data-x="{k}" data-y="{v!r}"><title>{k}: {_fmt(v)}</title></circle>'
        )
        body.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 12}" class="tick">{k}</text>')
    return _frame(chart, label, body, top, x_title, **data)


def bar_chart(
    bars: Sequence[tuple[str, float]], chart: str, label: str, x_title: str, **data
) -> str:
    """One bar per labelled value."""
    if not bars:
        return _empty(chart, label, **data)
    top = max(v for _, v in bars) or 1
    xs = _x_positions(len(bars))
    width = max(2.0, (WIDTH - LEFT - RIGHT) / len(bars) * 0.7)
    body = []
    for x, (name, value) in zip(xs, bars, strict=True):
        y = _y(value, top)
        body.append(
            f'<rect x="{x - width / 2:.1f}" y="{y:.1f}" width="{width:.1f}" '
            f'height="{HEIGHT - BOTTOM - y:.1f}" fill="{BAR}" class="mark" '
            f'data-x="{escape(name)}" data-y="{value!r}">'
            f"<title>{escape(name)}: {_fmt(value)}</title></rect>"
        )
        if len(bars) <= 12:
            body.append(
                f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 12}" class="tick">{escape(name)}</text>'
            )
    return _frame(chart, label, body, top, x_title, **data)


def stacked_bars(
    bars: Sequence[tuple[int, dict[str, int]]], chart: str, label: str, x_title: str, **data
) -> str:
    """One bar per x, stacked by kind (add / update / delete)."""
    if not bars:
        return _empty(chart, label, **data)
    top = max(sum(kinds.values()) for _, kinds in bars) or 1
    xs = _x_positions(len(bars))
    width = max(2.0, (WIDTH - LEFT - RIGHT) / len(bars) * 0.7)
    body = []
    for x, (k, kinds) in zip(xs, bars, strict=True):
        base = 0
        for kind, count in kinds.items():
            y0, y1 = _y(base, top), _y(base + count, top)
            body.append(
                f'<rect x="{x - width / 2:.1f}" y="{y1:.1f}" width="{width:.1f}" '
                f'height="{y0 - y1:.1f}" fill="{COLORS.get(kind, BAR)}" class="mark" '
                f'data-x="{k}" data-kind="{escape(kind)}" data-y="{count}">'
                f"<title>checkpoint {k}: {count} {escape(kind)}</title></rect>"
            )
            base += count
        body.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 12}" class="tick">{k}</text>')
    return _frame(chart, label, body, top, x_title, **data)


def histogram(
    values: Sequence[int],
    chart: str,
    label: str,
    x_title: str,
    bins: int = 20,
    limit: int | None = None,
    **data,
) -> str:
    """Counts of ``values`` in equal bins; a dashed line at ``limit`` when one is set."""
    if not values:
        return _empty(chart, label, **data)
    bounds = [*values, *([limit] if limit is not None else [])]
    low, high = min(bounds), max(bounds)
    step = max(1, -(-(high - low + 1) // bins))
    counts = [0] * bins
    for v in values:
        counts[min((v - low) // step, bins - 1)] += 1
    top = max(counts) or 1
    xs = _x_positions(bins)
    width = (WIDTH - LEFT - RIGHT) / bins * 0.9
    body = []
    for i, (x, count) in enumerate(zip(xs, counts, strict=True)):
        start, end = low + i * step, low + (i + 1) * step - 1
        y = _y(count, top)
        body.append(
            f'<rect x="{x - width / 2:.1f}" y="{y:.1f}" width="{width:.1f}" '
            f'height="{HEIGHT - BOTTOM - y:.1f}" fill="{BAR}" class="mark" '
            f'data-from="{start}" data-to="{end}" data-y="{count}">'
            f"<title>{start}–{end}: {count}</title></rect>"
        )
    body.append(f'<text x="{LEFT}" y="{HEIGHT - BOTTOM + 12}" class="tick">{low}</text>')
    body.append(
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 12}" text-anchor="end" '
        f'class="tick">{low + bins * step - 1}</text>'
    )
    if limit is not None:
        span = WIDTH - LEFT - RIGHT
        x = LEFT + span * (limit - low) / (bins * step)
        body.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" '
            f'stroke="#c62828" stroke-dasharray="4 3" class="limit" data-limit="{limit}">'
            f"<title>limit {limit}</title></line>"
        )
    return _frame(chart, label, body, top, x_title, **data)


SPARK_W, SPARK_H = 96, 22


def sparkline(
    points: Sequence[tuple[int, float]], chart: str, label: str, y_max: float | None = None, **data
) -> str:
    """A curve small enough for a table cell: no axes; its values in a ``<title>``."""
    attrs = "".join(f' data-{k}="{escape(str(v))}"' for k, v in data.items())
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SPARK_W} {SPARK_H}" '
        f'width="{SPARK_W}" height="{SPARK_H}" role="img" aria-label="{escape(label)}" '
        f'class="spark" data-chart="{escape(chart)}"{attrs}>'
    )
    if not points:
        return head + "</svg>"
    top = y_max if y_max is not None else max(v for _, v in points) or 1
    step = (SPARK_W - 4) / max(1, len(points) - 1)
    coords = [
        (2 + i * step, SPARK_H - 2 - (SPARK_H - 4) * (v / top if top else 0))
        for i, (_, v) in enumerate(points)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    first, last = points[0], points[-1]
    title = f"{first[0]}: {_fmt(first[1])} … {last[0]}: {_fmt(last[1])}"
    x, y = coords[-1]
    return (
        head + f"<title>{escape(title)}</title>"
        f'<polyline points="{path}" fill="none" stroke="{LINE}" stroke-width="1.5"/>'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{LINE}"/></svg>'
    )


def inline_bar(name: str, value: float, top: float, chart: str, **data) -> str:
    """A horizontal bar for a table cell, its length ``value / top`` of the cell."""
    attrs = "".join(f' data-{k}="{escape(str(v))}"' for k, v in data.items())
    width = (SPARK_W - 2) * (value / top if top else 0)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SPARK_W} 10" width="{SPARK_W}" '
        f'height="10" role="img" aria-label="{escape(name)}: {_fmt(value)}" class="spark" '
        f'data-chart="{escape(chart)}"{attrs}><rect x="1" y="1" width="{width:.1f}" height="8" '
        f'fill="{BAR}" class="mark" data-x="{escape(name)}" data-y="{value!r}">'
        f"<title>{escape(name)}: {_fmt(value)}</title></rect></svg>"
    )


def history_chart(rows: Sequence[dict], chart: str, label: str, **data) -> str:
    """A state's mean reward by policy step: one circle per step (or merged range of steps)
    at its steps' middle, joined by a line, on the reward scale (−1 to 1, wider if a reward
    is); rows without a step are left out."""
    points = [r for r in rows if r["step_first"] is not None]
    if not points:
        return _empty(chart, label, **data)
    lo = min(-1.0, *(r["score_mean"] for r in points))
    hi = max(1.0, *(r["score_mean"] for r in points))
    first, last = points[0]["step_first"], points[-1]["step_last"]
    span_x, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(r: dict) -> float:
        middle = (r["step_first"] + r["step_last"]) / 2
        return LEFT + span_x * ((middle - first) / (last - first) if last > first else 0.5)

    def y_of(value: float) -> float:
        return HEIGHT - BOTTOM - plot_h * (value - lo) / (hi - lo)

    coords = [(x_of(r), y_of(r["score_mean"])) for r in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    body = [
        f'<line x1="{LEFT}" y1="{y_of(0):.1f}" x2="{WIDTH - RIGHT}" y2="{y_of(0):.1f}" '
        'stroke="#ddd"/>',
        f'<polyline points="{path}" fill="none" stroke="{LINE}" stroke-width="1.5"/>',
    ]
    for (x, y), r in zip(coords, points, strict=True):
        steps = f"{r['step_first']}" + (
            f"–{r['step_last']}" if r["step_last"] != r["step_first"] else ""
        )
        var = "-" if r["score_var"] is None else _fmt(r["score_var"])
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{LINE}" class="mark" '
            f'data-x="{steps}" data-y="{r["score_mean"]!r}" data-draws="{r["draws"]}">'
            f"<title>step {steps}: mean {_fmt(r['score_mean'])}, variance {var}, "
            f"{r['draws']} draws, {r['answers']} answers</title></circle>"
        )
    body += [
        f'<text x="{LEFT}" y="{HEIGHT - BOTTOM + 12}" class="tick">{first}</text>',
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 12}" class="tick">{last}</text>',
    ]
    return _frame(chart, label, body, hi, "policy step", y_min=lo, **data)
