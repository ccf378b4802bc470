"""The report's sessions and feedback sections: real sessions built by the core, real feedback
segments folded into state_stats, the page parsed back against both."""

from __future__ import annotations

import re
import time
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.core.feedback.stats_store import update_stats
from statepool_dagster.core.report import write_report
from statepool_dagster.core.report.extras import STEP_BINS, session_rows
from statepool_dagster.core.segments.writer import SegmentWriter
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session


def _state(k: int) -> dict:
    return {
        "state_id": f"rollout-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": []},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}"}],
        "analysis": None,
        "last_receipt": "(online)",
        "followup_qids": [],
        "gt_map": {},
    }


def _sessions(root: Path, store: Path) -> None:
    spec = Settings.from_env(environ={}).prompt_spec()
    for writer in ("w0", "w1"):
        with StateWriter(root, "clean", writer=writer, max_records=3) as w:
            for k in range(6):
                w.append(_state(k if writer == "w0" else 100 + k), policy_step=k // 2)
    with StateWriter(root, "noisy", writer="w0") as w:
        for k in range(100):  # more steps than the curve's bins
            w.append(_state(1000 + k), policy_step=k)
    with (root / "noisy" / "segments" / "w9-000001.jsonl").open("w", encoding="utf-8") as f:
        f.write("{not json\n")
    for session in ("clean", "noisy"):
        build_session(root, store, session, spec)


def _feedback(store: Path) -> None:
    now = time.time()
    rec = {"state_id": "s1", "score": 1.0, "group": "g1", "time": now, "source": "trl",
           "ops_match": 1, "step": 3}  # fmt: skip
    with SegmentWriter(store / "feedback", "w") as writer:
        writer.append(rec)
        writer.append(rec)
        writer.append({**rec, "state_id": "s2", "group": "g2", "score": 0.0, "step": 5})
        writer.append({**rec, "state_id": "s2", "group": "g2", "score": 1.0, "step": 5})
    update_stats(store, store / "feedback", close_seconds=0, now=now + 1)


def test_report_shows_sessions_rejects_first_and_feedback_plots(tmp_path: Path) -> None:
    root, store = tmp_path / "sessions", tmp_path / "store"
    _sessions(root, store)
    page = write_report(store).read_text(encoding="utf-8")
    offline = page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in offline and "https://" not in offline and "<script src" not in page
    assert "<h2>Feedback" not in page, "no feedback plots before a state_stats table"
    order = re.findall(r'<tr data-session="([^"]+)"( class="flagged")?>', page)
    assert order == [("noisy", ' class="flagged"'), ("clean", "")]
    rows = {r.session: r for r in session_rows(store)}
    clean, noisy = rows["clean"], rows["noisy"]
    assert (clean.states, clean.segments, clean.writers, clean.rejects) == (12, 4, ["w0", "w1"], 0)
    assert clean.steps == [(0, 4.0), (1, 4.0), (2, 4.0)] and clean.step_range == (0, 2)
    assert (noisy.states, noisy.rejects, noisy.step_range) == (100, 1, (0, 99))
    # 100 steps in bins of 3 whole steps (at most STEP_BINS of them), the last one partial
    assert len(noisy.steps) <= STEP_BINS and noisy.steps[:2] == [(0, 3.0), (3, 3.0)]
    assert [v for _, v in noisy.steps] == [3.0] * 33 + [1.0]

    _feedback(store)
    page = write_report(store).read_text(encoding="utf-8")
    assert "<h2>Feedback (2 states with statistics)</h2>" in page
    marks = re.findall(r'data-x="(-?[\d.]+)" data-y="([\d.]+)" data-count="(\d+)"', page)
    # s1: mean 1, std 0; s2: mean 0.5, std 0.707 (x: the cell's low edge on -1..1 in 30 cells,
    # y: on 0..√2, the largest sample std of scores in [-1, 1])
    assert sorted((float(x), float(y), int(n)) for x, y, n in marks) == [
        (0.467, 0.707, 1),
        (0.933, 0.0, 1),
    ]
    scatter = re.search(r'data-chart="score-scatter".*?</svg>', page, re.S).group(0)
    assert ">1.414<" in scatter and ">-1<" in scatter, "axes from the score range"
    zero = re.search(r'data-chart="zero-share".*?</svg>', page, re.S).group(0)
    assert zero.count('class="mark"') == 2, "one point per policy step a state was last seen"
