"""The live pool as a reader: nothing written into the store but a fold of new feedback,
rows read in batches equal to rows read one by one, and a per-row version that tells a
rebuilt run's new row from its old."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import test_live_pool
from test_live_pool import _export, _feedback, _rows

from statepool_dagster.core.config import Settings
from statepool_dagster.core.feedback.folders import folded_segments
from statepool_dagster.core.feedback.select import SelectionOptions
from statepool_dagster.core.segments.writer import SegmentWriter
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run
from statepool_dagster.live import LivePool

from store_helpers import generated_state

built, pool = test_live_pool.built, test_live_pool.pool  # the same fixtures


def _tree(root: Path) -> str:
    """Every path under ``root`` with its bytes and modification time."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
            digest.update(str(path.stat().st_mtime_ns).encode())
    return digest.hexdigest()


def _one_more_segment(folder: Path, sid: str) -> None:
    now = time.time()
    with SegmentWriter(folder, "later") as writer:
        for score in (0.0, 1.0):
            writer.append({"state_id": sid, "score": score, "group": f"g-{now}", "time": now,
                           "source": "trl"})  # fmt: skip


def test_a_reader_writes_nothing_unless_a_feedback_segment_is_not_folded_yet(pool):
    feedback = pool.store / "feedback"
    options = SelectionOptions(drop_zero_variance=1, weight="std")
    before = _tree(pool.store)  # no feedback at all yet: no fold written
    live = LivePool(pool.store, sessions=pool.sessions, options=options, feedback=feedback,
                    refresh_seconds=0.0)  # fmt: skip
    live.refresh(force=True)
    assert len(live) and live[0] and _tree(pool.store) == before
    served = live.state_ids()
    _feedback(pool.store, {served[0]: [[0.0, 1.0]]})  # recorded and folded elsewhere
    before = _tree(pool.store)
    for _ in range(2):  # opened, then refreshed: every segment is folded already
        live = LivePool(pool.store, sessions=pool.sessions, options=options, feedback=feedback,
                        refresh_seconds=0.0)  # fmt: skip
        assert live.refresh(force=True) is False
        assert [live[i] for i in range(len(live))] and _tree(pool.store) == before
    _one_more_segment(feedback, served[1])  # a segment the saved fold has not read: folded
    live.refresh(force=True)
    assert "later-000000.jsonl" in folded_segments(pool.store)
    assert _tree(pool.store) != before


def test_rows_read_in_a_batch_are_the_rows_read_one_by_one(pool):
    with StateWriter(pool.sessions, "gamma", writer="w") as writer:  # served from its segment
        for k in range(50, 56):
            writer.append(generated_state(k), policy_step=2)
    live = LivePool(pool.store, sessions=pool.sessions, options=SelectionOptions(weight="std"))
    n = len(live)
    asked = [n - 1, 0, 3, n - 2, 3, *range(n - 1, -1, -1), -1]
    rows = live.export_rows(asked)
    assert rows == [live.export_row(i) for i in asked]
    assert [r.state_id for r in rows] == [live.state_id(i) for i in asked]
    assert {(r.source, r.session) for r in rows} == {
        ("runs", None),
        ("sessions", "alpha"),
        ("sessions", "beta"),
        ("sessions", "gamma"),
    }  # run states, stored session states and a segment's states
    assert live.rows(asked) == [live[i] for i in asked]
    assert live.export_rows([]) == []
    url = LivePool(f"local://{pool.store}", sessions=f"local://{pool.sessions}",
                   options=SelectionOptions(weight="std"))  # fmt: skip
    assert url.export_rows(asked) == [url.export_row(i) for i in asked] == rows  # fsspec's files
    # a segment gone meanwhile (Dagster stored it, the writer's folder cleaned): its rows are
    # read alone as export_row reads them (the pool finds them in the store)
    gamma = [i for i, r in enumerate(live.export_rows(range(n))) if r.session == "gamma"]
    build_session(pool.sessions, pool.store, "gamma", pool.settings.prompt_spec())
    shutil.rmtree(pool.sessions / "gamma")
    assert live.export_rows(gamma) == [live.export_row(i) for i in gamma]
    assert [r.session for r in live.export_rows(gamma)] == ["gamma"] * len(gamma)


def test_a_rebuilt_runs_changed_rows_have_new_row_keys_and_the_others_keep_theirs(pool):
    runs = pool.root / "runs9"
    spec = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
    generate_run(runs / "run009", spec, 9)
    settings = Settings(runs_dir=str(runs), store_dir=str(pool.store))
    build_run(settings, "run009")
    with StateWriter(pool.sessions, "gamma", writer="w") as writer:
        writer.append(generated_state(60), policy_step=1)
    live = LivePool(pool.store, sessions=pool.sessions, refresh_seconds=0.0)
    ids = live.state_ids()
    keys = {sid: live.row_key(i) for i, sid in enumerate(ids)}
    rows = {sid: live[i] for i, sid in enumerate(ids)}
    assert live.rekeyed() == ([], live.rekeyed()[1])
    mark = live.rekeyed()[1]
    episodes = runs / "run009" / "episodes.jsonl"  # the run's episodes change; synced again
    lines = [json.loads(line) for line in episodes.read_text("utf-8").splitlines()]
    for line in lines:
        if line["skill_lib_version"] == 1:
            line["question"] += " (asked again)"
    episodes.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    build_run(settings, "run009")
    build_session(pool.sessions, pool.store, "gamma", pool.settings.prompt_spec())  # stored
    assert live.refresh()  # the rows changed, not the states
    assert live.state_ids() == ids
    changed, mark = live.rekeyed(mark)
    assert changed and {s.rsplit("_ckpt", 1)[0] for s in changed} == {"run009"}
    for i, sid in enumerate(ids):
        new_key, new_row = live.row_key(i), live[i]
        assert (new_key != keys[sid]) == (sid in changed) == (new_row != rows[sid]), sid
    assert _rows(live) == _export(pool.store)
    assert live.rekeyed(mark) == ([], mark)
    assert not live.refresh()


def test_the_trl_stream_writes_the_trl_exports_rows(pool):
    from statepool_dagster.core.export.collect import collect_export
    from statepool_dagster.core.export.formats import trl_record
    from statepool_dagster.trainers.trl import live_rows

    export = collect_export(pool.store, test_live_pool.OPTIONS)
    expected = {r.state_id: trl_record(r, True, False) for r in export.rows}
    stream = live_rows(str(pool.store), str(pool.sessions), refresh_seconds=60.0)
    rows = {row["state_id"]: row for row in (next(stream) for _ in range(len(expected)))}
    assert rows.keys() == expected.keys()
    for sid, row in rows.items():  # the export's index is its place in its split, as served
        assert row == expected[sid], sid
