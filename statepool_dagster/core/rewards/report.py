"""``statepool score``'s text report: one line per answer, one per group, a summary."""

from __future__ import annotations

from ..words import plural
from .completions import ScoreReport

PROBLEMS_SHOWN = 2


def _part(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def score_table(report: ScoreReport) -> str:
    """The report as aligned text (problems cut to the first two per answer)."""
    lines = [
        f"{'line':>6}  {'state_id':<28}{'score':>8}{'valid':>8}{'agree':>8}{'adv':>8}  problems"
    ]
    for s in report.lines:
        g = s.grade
        problems = "; ".join(g.problems[:PROBLEMS_SHOWN])
        if len(g.problems) > PROBLEMS_SHOWN:
            problems += f"; (+{len(g.problems) - PROBLEMS_SHOWN} more)"
        lines.append(
            f"{s.line:>6}  {s.state_id:<28}{g.score:>8.3f}{_part(g.validity):>8}"
            f"{_part(g.agreement):>8}{s.advantage:>8.3f}  {problems}"
        )
    lines += ["", f"{'state_id':<28}{'n':>4}{'mean':>8}{'std':>8}"]
    for sid, group in report.groups().items():
        lines.append(f"{sid:<28}{group['n']:>4}{group['mean']:>8.3f}{group['std']:>8.3f}")
    summary = report.summary()
    mean = summary["mean_score"]
    lines += [
        "",
        f"{plural(summary['lines_scored'], 'answer')} scored in "
        f"{plural(summary['groups'], 'group')}"
        + ("" if mean is None else f", mean score {mean:.3f}")
        + f"; {summary['unparsed']} unparsed, {plural(summary['bad_lines'], 'bad line')}, "
        f"{plural(summary['unknown_states'], 'unknown state id')}",
    ]
    return "\n".join(lines)
