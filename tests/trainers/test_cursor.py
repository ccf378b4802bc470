"""Pool versions and cursors without a trainer: what is kept, what is refused, what survives a kill.

The resume tests with the real trainers are tests/trainers/test_resume.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run, generate_runs
from statepool_dagster.live import LivePool
from statepool_dagster.live.versions import VersionGone, save_version, versions_folder
from statepool_dagster.trainers.cursor import CursorError, DrawOrder
from statepool_dagster.trainers.trl import CURSOR_FILE, _save_cursor, load_cursor

from process_helpers import REPO
from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=3, emb_dim=2, episodes_per_batch=1)


@pytest.fixture
def store(tmp_path) -> Path:
    runs, store = tmp_path / "runs", tmp_path / "store"
    generate_runs(runs, SPEC)
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for run in ("run000", "run001"):
        build_run(settings, run)
    return store


def draws(order: DrawOrder, n: int) -> list[str]:
    return [order.pool.state_id(order.next()) for _ in range(n)]


def test_a_cursor_taken_up_draws_on_as_the_stream_would_have(store, tmp_path):
    sessions = tmp_path / "sessions"
    order = DrawOrder(LivePool(store, sessions), weighted=False, seed=0)
    draws(order, 4)
    cursor = order.state_dict(3)  # the trainer consumed 3; one more was pulled ahead
    whole = DrawOrder(LivePool(store, sessions), weighted=False, seed=0)  # uninterrupted
    draws(whole, 3)
    with StateWriter(sessions, "s", writer="w") as writer:  # sealed while it was down
        writer.append(generated_state(7), policy_step=1)
    whole.pool.refresh(force=True)
    whole.update()
    expected = draws(whole, 10)
    resumed = DrawOrder.resumed(
        LivePool(store, sessions, as_of=cursor["version"]), False, 0, cursor
    )
    got = draws(resumed, 10)
    assert got == expected
    assert got[3].startswith("s-")  # after the 3 the cursor had queued, before any repeat


def test_a_weighted_draw_resumes_with_its_random_numbers(store, tmp_path):
    pool = LivePool(store)
    order = DrawOrder(pool, weighted=True, seed=5)
    first = draws(order, 20)
    cursor = order.state_dict(12)
    resumed = DrawOrder.resumed(LivePool(store, as_of=cursor["version"]), True, 5, cursor)
    assert draws(resumed, 8) == first[12:]


def test_a_cursor_is_refused_when_damaged_truncated_or_of_another_store(store, tmp_path):
    pool = LivePool(store)
    order = DrawOrder(pool, weighted=False, seed=0)
    draws(order, 2)
    cursor = order.state_dict()
    again = LivePool(store, as_of=cursor["version"])
    with pytest.raises(CursorError, match="damaged"):
        DrawOrder.resumed(again, False, 0, {**cursor, "cursor": cursor["cursor"] + 1})
    with pytest.raises(CursorError, match="not a statepool cursor"):
        DrawOrder.resumed(again, False, 0, {"format": 1})
    other = tmp_path / "other"
    other.mkdir()
    os.rename(store, other / "store")
    with pytest.raises(CursorError, match="of the store"):
        DrawOrder.resumed(LivePool(other / "store", as_of=cursor["version"]), False, 0, cursor)
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    (folder / CURSOR_FILE).write_text(json.dumps(cursor)[:100])
    with pytest.raises(CursorError, match="not a statepool cursor"):
        load_cursor(folder)


def test_versions_are_kept_once_per_content_and_pruned_past_the_retention(store):
    ids, keys = ["a", "b"], ["1", "2"]
    first = save_version(store, ids, keys)
    assert save_version(store, ids, keys) == first  # the same content: not written again
    made = [save_version(store, ids, [str(n), "2"], keep=2, keep_days=0) for n in range(3, 7)]
    kept = sorted(p.name.removesuffix(".parquet") for p in versions_folder(store).iterdir())
    assert kept == made[-2:]
    with pytest.raises(VersionGone, match=f"{first}.*STATEPOOL_KEEP_VERSIONS"):
        LivePool(store, as_of=first)


def test_as_of_serves_the_versions_order_and_names_the_rows_changed_since(store, tmp_path):
    pool = LivePool(store)
    version = pool.version()
    runs = tmp_path / "runs"
    generate_run(runs / "run001", SampleSpec(n_runs=1, n_checkpoints=2, n_cards=3, emb_dim=2,
                                             episodes_per_batch=1), 9)  # fmt: skip
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), "run001")
    again = LivePool(store, as_of=version)
    assert again.missing_since == ["run001_ckpt2"]
    assert set(again.changed_since) == {"run001_ckpt0", "run001_ckpt1"}
    assert again.state_ids() == [s for s in pool.state_ids() if s != "run001_ckpt2"]


WRITER = """
    import sys
    from pathlib import Path
    from statepool_dagster.trainers.trl import _save_cursor
    folder = Path(sys.argv[1])
    big = {{"format": 1, "pad": "x" * (8 << 20)}}
    n = 0
    while True:
        n += 1
        _save_cursor(folder, {{**big, "n": n}})
"""


def test_a_kill_while_the_cursor_is_written_leaves_a_whole_one(tmp_path):
    _save_cursor(tmp_path, {"format": 1, "n": 0})
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(tmp_path)],
                                cwd=REPO)  # fmt: skip
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = json.loads((tmp_path / CURSOR_FILE).read_bytes())  # whole: old or new
        assert "n" in state


def test_export_as_of_writes_the_versions_states_and_tells_what_changed(store, tmp_path):
    import pyarrow.parquet as pq

    from cli_helpers import STATEPOOL

    version = LivePool(store).version()
    runs = tmp_path / "runs"
    small = SampleSpec(n_runs=1, n_checkpoints=2, n_cards=3, emb_dim=2, episodes_per_batch=1)
    generate_run(runs / "run001", small, 9)
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), "run001")
    with StateWriter(tmp_path / "sessions", "s", writer="w") as writer:  # not in the version
        writer.append(generated_state(7), policy_step=1)

    def export(*flags: str) -> subprocess.CompletedProcess:
        argv = [str(STATEPOOL), "export", "--format", "verl", "--store", str(store), *flags]
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)

    done = export("--out", "o", "--val-fraction", "0", "--as-of", version)
    assert done.returncode == 0, done.stderr
    ids = pq.read_table(tmp_path / "o" / "train.parquet")["extra_info"].to_pylist()
    assert sorted(i["state_id"] for i in ids) == sorted(
        s for s in LivePool(store, as_of=version).as_of.state_ids if s != "run001_ckpt2"
    )
    assert "1 states no longer in the pool: run001_ckpt2" in done.stderr
    assert "2 states changed since" in done.stderr
    gone = export("--out", "p", "--as-of", "0000000000000-0123456789abcdef")
    assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1
    assert gone.stderr.startswith("statepool export: --as-of: pool version")


def test_a_session_stored_while_the_trainer_was_down_changes_nothing_it_draws(store, tmp_path):
    from statepool_dagster.core.sessions.build import build_session

    sessions = tmp_path / "sessions"
    with StateWriter(sessions, "s", writer="w") as writer:
        for k in range(3):
            writer.append(generated_state(k), policy_step=k)
    order = DrawOrder(LivePool(store, sessions), weighted=False, seed=0)
    whole = draws(order, 14)
    cursor = DrawOrder(LivePool(store, sessions), weighted=False, seed=0)
    draws(cursor, 5)
    state = cursor.state_dict()
    settings = Settings(store_dir=str(store), sessions_dir=str(sessions))
    build_session(sessions, store, "s", settings.prompt_spec())  # what a Dagster sync stores
    again = LivePool(store, sessions, as_of=state["version"])
    assert again.changed_since == [] and again.missing_since == []
    assert draws(DrawOrder.resumed(again, False, 0, state), 9) == whole[5:]
