"""A session holding one huge state: ``statepool sync`` builds it within the memory bound
that holds for runs (500 MB for any input), whether the state's bulk is one long text or
many small cards (peaks of 549 and 628 MB before the session build stopped copying it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.core.export.sessions import iter_session_table
from statepool_dagster.core.sessions import StateWriter

from cli_helpers import cli_env, peak_rss_mb

pytestmark = pytest.mark.slow  # two syncs of a 30 MB state, memory measured in a child

BOUND_MB = 500
SIZE = 30 << 20


def _big_state(shape: str) -> dict:
    state = {
        "state_id": f"big-{shape}",
        "dataset": "ovo",
        "lib_snapshot": {"version": 1, "cards": []},
        "episodes": [],
        "analysis": None,
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }
    if shape == "text":
        state["episodes"] = [{"skill_lib_version": 1, "question": "q", "trace": "é" * (SIZE // 2)}]
    else:
        meta = {"injected": 3, "fired": 2, "helped": 1, "harmful": 0}
        card = {"trigger": "t" * 120, "program": "p" * 150, "meta_info": meta}
        count = SIZE // 350
        state["lib_snapshot"]["cards"] = [{**card, "card_id": f"c{i:06d}"} for i in range(count)]
    return state


@pytest.mark.parametrize("shape", ["text", "cards"])
def test_sync_builds_a_session_with_a_30_mb_state_within_the_bound(tmp_path: Path, shape):
    workspace = SimpleNamespace(runs=tmp_path / "runs", store=tmp_path / "store")
    workspace.runs.mkdir()
    sessions = tmp_path / "sessions"
    with StateWriter(sessions, "big", writer="w0") as writer:
        writer.append(_big_state(shape), policy_step=1)
    segment = next((sessions / "big" / "segments").glob("*.jsonl"))
    assert segment.stat().st_size >= SIZE
    env = {**cli_env(workspace, tmp_path / "home"), "STATEPOOL_SESSIONS_DIR": str(sessions)}
    peak = peak_rss_mb(env, tmp_path, "sync", "-q")
    assert peak <= BOUND_MB, f"statepool sync peaked at {peak:.0f} MB"
    for which in ("states", "prompts"):
        batches = iter_session_table(workspace.store, "big", which, ["state_id"])
        assert sum(b.num_rows for b in batches) == 1, which
