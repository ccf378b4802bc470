"""The report's sessions and feedback sections, read a batch at a time.

A session's line holds its counts from the session's index and its states per policy
step, summed into at most ``STEP_BINS`` bins of whole steps; the feedback plots bin the per-state
``state_stats`` table as it is read, so neither grows with the number of states.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from html import escape

import pyarrow.parquet as pq

from ..export.sessions import iter_session_table
from ..feedback.folders import stats_folder
from ..feedback.stats_store import STATS_TABLE as TABLE
from ..locations import AnyPath, as_path, is_local
from ..names import SCORE_RANGE
from ..scales import STD_TOP
from ..sessions.build import session_totals
from ..sessions.layout import stored_sessions
from . import svg

STEP_BINS = 40  # a session's policy-step curve has this many points at most
GRID = 30  # the score mean / std scatter is drawn on a GRID × GRID grid
BATCH = 4096


@dataclass
class SessionRow:
    """One session's line of the report: counts and its binned states per policy step."""

    session: str
    states: int
    copies: int
    segments: int
    writers: list[str]
    rejects: int
    steps: list[tuple[int, float]]  # (first policy step of the bin, states)
    step_range: tuple[int, int] | None


def _binned(counts: Counter[int]) -> list[tuple[int, float]]:
    items = sorted(counts.items())
    if len(items) <= STEP_BINS:
        return [(k, float(v)) for k, v in items]
    low, high = items[0][0], items[-1][0]
    width = -(-(high - low + 1) // STEP_BINS)  # whole steps per bin, so bins compare
    bins = [0] * (-(-(high - low + 1) // width))
    for step, count in items:
        bins[(step - low) // width] += count
    return [(low + i * width, float(n)) for i, n in enumerate(bins)]


def session_rows(store: str | os.PathLike[str] | AnyPath) -> list[SessionRow]:
    """Every stored session, states per policy step counted from its table in batches."""
    rows = []
    for session in stored_sessions(store):
        totals = session_totals(store, session)
        counts: Counter[int] = Counter()
        states = 0
        for batch in iter_session_table(store, session, "states", ["policy_step"], BATCH):
            steps = batch.column("policy_step").to_pylist()
            states += len(steps)
            counts.update(-1 if s is None else s for s in steps)
        known = [s for s in counts if s >= 0]
        rows.append(
            SessionRow(
                session=session,
                states=states,
                copies=totals.states,
                segments=totals.segments,
                writers=totals.writers,
                rejects=totals.rejects,
                steps=_binned(counts),
                step_range=(min(known), max(known)) if known else None,
            )
        )
    return rows


def _cell(text: str, sort: object, numeric: bool = False) -> str:
    cls = ' class="n"' if numeric else ""
    return f'<td{cls} data-sort="{escape(str(sort))}">{text}</td>'


SESSION_COLUMNS = ("session", "rejects", "states", "copies", "segments", "writers", "policy steps")
SHOWN_WRITERS = 4


def _session_line(row: SessionRow) -> str:
    name = escape(row.session)
    writers = ", ".join(escape(w) for w in row.writers[:SHOWN_WRITERS])
    if len(row.writers) > SHOWN_WRITERS:
        writers += f" +{len(row.writers) - SHOWN_WRITERS}"
    steps = "–" if row.step_range is None else f"{row.step_range[0]}–{row.step_range[1]}"
    curve = svg.sparkline(row.steps, "session-steps", "states per policy step", session=row.session)
    flagged = ' class="flagged"' if row.rejects else ""
    cells = [
        _cell(name, row.session),
        _cell(f'<span class="bad">{row.rejects}</span>' if row.rejects else "0", row.rejects, True),
        _cell(str(row.states), row.states, True),
        _cell(str(row.copies), row.copies, True),
        _cell(str(row.segments), row.segments, True),
        _cell(f"{len(row.writers)}: {writers}", len(row.writers), True),
        _cell(f"{curve} {steps}", row.step_range[1] if row.step_range else "", True),
    ]
    return f'<tr data-session="{name}"{flagged}>' + "".join(cells) + "</tr>"


def sessions_section(rows: list[SessionRow]) -> str:
    """The sessions table, sessions with rejects first; empty when there is none."""
    if not rows:
        return ""
    ordered = sorted(enumerate(rows), key=lambda item: (not item[1].rejects, item[0]))
    head = "".join(f'<th scope="col">{c}</th>' for c in SESSION_COLUMNS)
    lines = "\n".join(_session_line(row) for _, row in ordered)
    return (
        f"<h2>Sessions ({len(rows)})</h2>"
        "<p>Sessions with rejected lines first; the curve is the session's states per policy "
        "step (each state counted once, at the step of its first copy).</p>"
        f'<table class="runs sessions"><thead><tr>{head}</tr></thead>'
        f"<tbody>{lines}</tbody></table>"
    )


@dataclass
class FeedbackNumbers:
    """``state_stats`` binned: score mean × std counts, zero-variance groups per step."""

    states: int = 0
    grid: Counter[tuple[int, int]] = field(default_factory=Counter)
    zero: Counter[int] = field(default_factory=Counter)  # last step -> zero-variance groups
    groups: Counter[int] = field(default_factory=Counter)  # last step -> groups


def feedback_numbers(store: str | os.PathLike[str] | AnyPath) -> FeedbackNumbers | None:
    """The feedback plots' numbers from ``state_stats.parquet``, or ``None`` without one."""
    path = stats_folder(str(as_path(store))) / TABLE
    if not path.exists():
        return None
    numbers = FeedbackNumbers()
    columns = ["score_mean", "score_std", "groups", "zero_variance_groups", "last_step"]
    handle = None if is_local(path) else path.open("rb")
    try:
        with pq.ParquetFile(path if handle is None else handle) as parquet:
            for batch in parquet.iter_batches(batch_size=BATCH, columns=columns):
                _add(numbers, batch.to_pydict())
    finally:
        if handle is not None:
            handle.close()
    return numbers


def _add(numbers: FeedbackNumbers, cols: dict[str, list]) -> None:
    for mean, std, groups, zero, step in zip(*(cols[c] for c in cols), strict=True):
        numbers.states += 1
        if mean is not None:
            low, high = SCORE_RANGE
            x = min(GRID - 1, max(0, int((mean - low) / (high - low) * GRID)))
            y = min(GRID - 1, max(0, int((std or 0.0) / STD_TOP * GRID)))
            numbers.grid[x, y] += 1
        if step is not None and step >= 0 and groups:
            numbers.groups[step] += groups
            numbers.zero[step] += zero or 0


def scatter(numbers: FeedbackNumbers) -> str:
    """Score mean against std per state: one circle per occupied cell, its area by count."""
    if not numbers.grid:
        return svg._empty("score-scatter", "score mean vs std")
    top = max(numbers.grid.values())
    span_x = svg.WIDTH - svg.LEFT - svg.RIGHT
    span_y = svg.HEIGHT - svg.TOP - svg.BOTTOM
    marks = []
    for (x, y), count in sorted(numbers.grid.items()):
        cx = svg.LEFT + span_x * (x + 0.5) / GRID
        cy = svg.HEIGHT - svg.BOTTOM - span_y * (y + 0.5) / GRID
        r = 1.5 + 4.5 * (count / top) ** 0.5
        width = (SCORE_RANGE[1] - SCORE_RANGE[0]) / GRID
        mean, std = SCORE_RANGE[0] + x * width, y * STD_TOP / GRID
        marks.append(
            f'<circle class="mark" cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}" fill="{svg.LINE}" '
            f'fill-opacity=".6" data-x="{mean:.3f}" data-y="{std:.3f}" data-count="{count}">'
            f"<title>mean {mean:.2f}–{mean + width:.2f}, std {std:.2f}: {count} states"
            "</title></circle>"
        )
    low, high = SCORE_RANGE
    ticks = [
        f'<text class="tick" x="{svg.LEFT + span_x * (v - low) / (high - low):.1f}" '
        f'y="{svg.HEIGHT - 16}">{v:g}</text>'
        for v in (low, (low + high) / 2, high)
    ]
    body = [*marks, *ticks]
    # The axes span the grader's score range and the largest sample std scores can have.
    return svg._frame("score-scatter", "score mean vs std", body, STD_TOP, "score mean (y: std)")


def zero_share_points(numbers: FeedbackNumbers) -> list[tuple[int, float]]:
    """Share of zero-variance groups per policy step a state was last seen, binned."""
    steps = sorted(numbers.groups)
    if len(steps) > STEP_BINS:
        low, width = steps[0], -(-(steps[-1] - steps[0] + 1) // STEP_BINS)
        zero: Counter[int] = Counter()
        groups: Counter[int] = Counter()
        for s in steps:
            key = low + (s - low) // width * width
            zero[key] += numbers.zero[s]
            groups[key] += numbers.groups[s]
    else:
        zero, groups = numbers.zero, numbers.groups
    return [(s, zero[s] / groups[s]) for s in sorted(groups) if groups[s]]


def feedback_section(numbers: FeedbackNumbers | None) -> str:
    """The feedback plots, or nothing before the first ``state_stats``."""
    if numbers is None:
        return ""
    from .run_page import figure

    share = svg.line_chart(
        zero_share_points(numbers),
        "zero-share",
        "zero-variance share of groups by policy step",
        "policy step (states by the step last seen)",
        y_max=1.0,
    )
    return "\n".join(
        [
            f"<h2>Feedback ({numbers.states} states with statistics)</h2>",
            '<div class="row">',
            figure("score mean vs standard deviation per state (area: states)", scatter(numbers)),
            figure("zero-variance share of groups, by the step states were last seen", share),
            "</div>",
        ]
    )
