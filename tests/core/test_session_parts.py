"""A session part holds every row Arrow can store; a row it cannot is left out and named."""

from __future__ import annotations

import pyarrow.parquet as pq

from statepool_dagster.core.sessions.store import PROMPTS_SCHEMA, _PartFile


def row(state_id: str, line: int, policy_step: int) -> dict:
    return {"state_id": state_id, "session": "s", "segment": "w-000000.jsonl", "line": line,
            "policy_step": policy_step, "prompt": "p"}  # fmt: skip


def test_a_row_its_column_cannot_hold_is_left_out_and_the_others_are_written(tmp_path):
    part = _PartFile(tmp_path / "w-000000.parquet", PROMPTS_SCHEMA)
    part.add(row("a", 1, 1))
    part.add(row("b", 2, 2**70))  # wider than int64: no door let it through, still no stop
    part.add(row("c", 3, 3))
    part.finish()
    table = pq.read_table(tmp_path / "w-000000.parquet")
    assert table["state_id"].to_pylist() == ["a", "c"]
    [(left_out, why)] = part.unstorable
    assert left_out["line"] == 2 and isinstance(why, OverflowError | ValueError)
