"""The store and the sessions folder on S3, through s3fs, against moto's S3 server on 127.0.0.1.

The server (tests/s3server.py) speaks the S3 protocol over HTTP: no rename, listings by
prefix, ETags, whole-object puts. Everything here must equal what the local store holds.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import instance_for_test

from statepool_dagster.cli.sync import sync
from statepool_dagster.core.export.rows import FORMATS
from statepool_dagster.core.export.write import stream_export
from statepool_dagster.core.locations import RANGED_BLOCK, as_path, open_ranged, upload_tree
from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.segments.naming import segment_name
from statepool_dagster.core.segments.reader import iter_segment_lines
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.layout import discover_sessions
from statepool_dagster.core.sessions.spec import SessionSpecMismatch
from statepool_dagster.core.store.atomic import put_new, write_bytes_atomic
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs
from statepool_dagster.live import LivePool

from cli_helpers import STATEPOOL, cli_env
from store_helpers import assert_same_store, generated_state

pytestmark = pytest.mark.slow  # a server in this process, and `statepool` subprocesses

SPEC = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
SESSION = "rollouts"


def write_session(root, ks: range, writer: str = "w") -> list[str]:
    """States ``gen-<k>`` in session ``rollouts``, one sealed segment; the names sealed."""
    with StateWriter(root, SESSION, writer=writer) as states:
        for k in ks:
            states.append(generated_state(k), policy_step=k)
    return states.sealed


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> SimpleNamespace:
    """Runs, a sessions folder and the store they sync to, all on the local disk (read only)."""
    root = tmp_path_factory.mktemp("local")
    generate_runs(root / "runs", SPEC)
    write_session(root / "sessions", range(4))
    (root / "home").mkdir()
    with pytest.MonkeyPatch.context() as env, instance_for_test(temp_dir=str(root / "home")) as i:
        env.setenv("STATEPOOL_RUNS_DIR", str(root / "runs"))
        env.setenv("STATEPOOL_STORE_DIR", str(root / "store"))
        env.setenv("STATEPOOL_SESSIONS_DIR", str(root / "sessions"))
        summary = sync(i)
        assert not summary.failed
        assert [o.ok for o in summary.sessions] == [True]
    return SimpleNamespace(runs=root / "runs", sessions=root / "sessions", store=root / "store")


def statepool(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(STATEPOOL), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def on_s3(local, moto_s3, tmp_path_factory) -> SimpleNamespace:
    """The same runs and session, synced by ``statepool sync`` into a store on S3 (read only)."""
    bucket = moto_s3.make_bucket(f"store-{uuid.uuid4().hex[:12]}")
    store, sessions = f"{bucket}/store", f"{bucket}/sessions"
    upload_tree(local.sessions, as_path(sessions))  # the same segment bytes as the local one
    cwd = tmp_path_factory.mktemp("s3sync")
    env = cli_env(SimpleNamespace(runs=local.runs, store=store), cwd / "home")
    env["STATEPOOL_SESSIONS_DIR"] = sessions  # AWS_ENDPOINT_URL etc. come from moto_s3
    first = json.loads(statepool(env, cwd, "sync", "--json").stdout)
    return SimpleNamespace(
        bucket=bucket, store=store, sessions=sessions, env=env, cwd=cwd, first=first
    )


def test_sync_and_export_on_s3_write_what_the_local_store_holds(local, on_s3, tmp_path):
    env, store = on_s3.env, on_s3.store
    assert (on_s3.first["new"], on_s3.first["failed"]) == (SPEC.n_runs, 0)
    assert [s["ok"] for s in on_s3.first["sessions"]] == [True]
    assert_same_store(store, local.store)
    again = json.loads(statepool(env, tmp_path, "sync", "--json").stdout)
    assert (again["unchanged"], again["states_written"], again["sessions"]) == (SPEC.n_runs, 0, [])

    for fmt in FORMATS:  # every format in this process; the command below
        stream_export(local.store, {fmt: tmp_path / "expected" / fmt})
        stream_export(store, {fmt: tmp_path / fmt})
        assert_same_store(tmp_path / fmt, tmp_path / "expected" / fmt)
    out = f"{on_s3.bucket}/exports-{uuid.uuid4().hex[:8]}/verl"
    for target in (str(tmp_path / "cli"), out, out):  # the last replaces the one before it
        statepool(env, tmp_path, "export", "--format", "verl", "--store", store, "--out", target)
        assert_same_store(target, tmp_path / "expected" / "verl")


def test_a_session_writer_seals_segments_into_s3(s3_bucket, tmp_path):
    sessions = f"{s3_bucket}/sessions"
    assert write_session(sessions, range(3)) == [segment_name("w", 0)]
    assert write_session(sessions, range(3, 5)) == [segment_name("w", 1)]  # after the highest
    local = write_session(tmp_path, range(3))
    segments = list_segments(f"{sessions}/{SESSION}/segments")
    assert [s.name for s in segments] == [segment_name("w", 0), segment_name("w", 1)]
    ours = [json.loads(line) for _, line in iter_segment_lines(segments[0].path)]
    theirs = [
        json.loads(line)
        for _, line in iter_segment_lines(tmp_path / SESSION / "segments" / local[0])
    ]
    for line in (*ours, *theirs):
        line["_statepool"].pop("time")  # when it was appended
    assert ours == theirs
    assert segments[0].size == as_path(segments[0].path).stat().st_size


def test_an_unsealed_segment_is_never_on_s3(s3_bucket):
    sessions = f"{s3_bucket}/sessions"
    writer = StateWriter(sessions, SESSION, writer="w", max_age=3600, spec={"model": "m"})
    writer.append(generated_state(0), policy_step=0)
    folder = as_path(f"{sessions}/{SESSION}")
    assert list_segments(folder / "segments") == []
    assert folder.fs.find(folder.path) == [f"{folder.path}/session.json"]
    writer.segments.abandon()  # killed before sealing: nothing of it was ever put
    folder.fs.invalidate_cache()
    assert folder.fs.find(folder.path) == [f"{folder.path}/session.json"]


def test_a_long_lived_reader_on_s3_sees_what_other_clients_add(s3_bucket, moto_s3):
    from upath import UPath

    sessions = f"{s3_bucket}/sessions"
    other = UPath(sessions, **moto_s3.storage_options())  # its own client and listings cache
    write_session(other, range(2))
    assert discover_sessions(sessions) == ([SESSION], {})  # as the sessions sensor lists
    assert len(list_segments(f"{sessions}/{SESSION}/segments")) == 1
    with StateWriter(other, "later", writer="w") as writer:
        writer.append(generated_state(9), policy_step=0)
    write_session(other, range(2, 4))
    assert discover_sessions(sessions) == (["later", SESSION], {})
    assert len(list_segments(f"{sessions}/{SESSION}/segments")) == 2


def test_a_name_on_s3_is_put_once_and_never_overwritten(s3_bucket, moto_s3):
    target = as_path(f"{s3_bucket}/sessions/{SESSION}/segments/{segment_name('w', 0)}")
    assert put_new(target, b"first\n")
    moto_s3.reset_requests()
    assert not put_new(target, b"second\n")
    assert target.read_bytes() == b"first\n"
    puts = [r for r in moto_s3.requests if r.method == "PUT"]
    assert len(puts) == 1  # refused by the server (If-None-Match), not checked beforehand
    with pytest.raises(SessionSpecMismatch):
        StateWriter(f"{s3_bucket}/sessions", SESSION, spec={"model": "a"}).close()
        StateWriter(f"{s3_bucket}/sessions", SESSION, spec={"model": "b"})


def test_a_store_file_larger_than_a_part_goes_up_in_parts_and_is_read_by_ranges(s3_bucket, moto_s3):
    from upath import UPath

    options = {**moto_s3.storage_options(), "default_block_size": 5 << 20}  # S3's least part
    path = UPath(f"{s3_bucket}/store/exports/big.parquet", **options)
    data = os.urandom(12 << 20)
    moto_s3.reset_requests()
    write_bytes_atomic(path, data)
    calls = [
        (r.method, r.query.split("=")[0])
        for r in moto_s3.requests
        if r.path.endswith("big.parquet")
    ]
    # a multipart upload: started, its parts put, completed (the object appears then, whole)
    assert calls[0] == ("POST", "uploads") and calls[-1] == ("POST", "uploadId")
    assert set(calls[1:-1]) == {("PUT", "partNumber")}
    assert path.read_bytes() == data
    moto_s3.reset_requests()
    with open_ranged(path) as f:  # a read at a chosen place fetches about what it asks
        f.seek(5 << 20)
        assert f.read(100) == data[5 << 20 : (5 << 20) + 100]
    asked = [r.bytes_asked for r in moto_s3.requests if r.is_object_read]
    assert len(asked) == 1 and asked[0] <= 100 + RANGED_BLOCK


# ---------------------------------------------------------------- the live pool on S3


def sessions_copy(on_s3) -> str:
    """A sessions folder of this test's own on S3, holding what the store was synced from."""
    url = f"{on_s3.bucket}/sessions-{uuid.uuid4().hex[:8]}"
    source = as_path(on_s3.sessions)
    for path in source.fs.find(source.path):
        rest = path[len(source.path.rstrip("/")) + 1 :]
        as_path(f"{url}/{rest}").write_bytes(source.fs.cat_file(path))
    return url


def written(rows) -> list[int]:
    """Which ``generated_state(k)`` each row is (a session state's id is a digest)."""
    return [json.loads(row["extra_info"]["state"])["lib_snapshot"]["version"] for row in rows]


def segment_key(sessions: str, name: str) -> str:
    """How the server names a segment's object in its request log: ``/bucket/key``."""
    return f"/{sessions.removeprefix('s3://')}/{SESSION}/segments/{name}"


def test_the_live_pool_on_s3_serves_what_it_serves_locally(local, on_s3, tmp_path):
    here = tmp_path / "sessions"
    shutil.copytree(local.sessions, here)
    write_session(here, range(10, 15))  # sealed after the sync: served from the folder itself
    there = sessions_copy(on_s3)
    upload_tree(here, as_path(there))
    ours, theirs = LivePool(on_s3.store, there), LivePool(local.store, here)
    assert len(theirs) == SPEC.n_runs * SPEC.n_checkpoints + 4 + 5
    assert ours.state_ids() == theirs.state_ids()
    assert [ours[i] for i in range(len(ours))] == [theirs[i] for i in range(len(theirs))]


def test_a_refresh_on_s3_reads_the_new_segment_and_nothing_else(on_s3, moto_s3):
    sessions = sessions_copy(on_s3)
    # The pool's own options, so its s3fs client (and listings cache) is not the writer's:
    # the writer is another process as far as the pool can tell.
    pool = LivePool(on_s3.store, sessions, storage_options=moto_s3.storage_options())
    served = pool.state_ids()
    moto_s3.reset_requests()
    assert not pool.refresh(force=True)
    idle = moto_s3.requests[:]
    assert idle and all(r.is_listing or r.method == "HEAD" for r in idle)  # no object read

    sealed = write_session(sessions, range(20, 25))
    moto_s3.reset_requests()
    assert pool.refresh(force=True)
    assert pool.state_ids()[: len(served)] == served and len(pool) == len(served) + 5
    reads = [r.path for r in moto_s3.requests if r.is_object_read]
    assert reads == [segment_key(sessions, sealed[0])]  # once, whole, at indexing
    assert len(moto_s3.requests) == len(idle) + 1  # the same listings as when nothing changed

    moto_s3.reset_requests()
    rows = [pool[i] for i in range(len(served), len(pool))]
    assert written(rows) == list(range(20, 25))
    assert {r.path for r in moto_s3.requests if r.is_object_read} == {
        segment_key(sessions, sealed[0])
    }


def test_the_live_pool_keeps_serving_while_the_s3_endpoint_is_gone(on_s3, moto_s3, caplog):
    sessions = sessions_copy(on_s3)
    write_session(sessions, range(40, 42))  # rows read from the sessions folder at each read
    options = moto_s3.storage_options()  # fail fast: one attempt a call, no retries
    options["config_kwargs"] = {"retries": {"max_attempts": 1}, "connect_timeout": 2}
    pool = LivePool(on_s3.store, sessions, storage_options=options, stand_ins=True)
    served = pool.state_ids()
    rows = [pool[i] for i in range(len(pool))]
    assert written(rows[-2:]) == [40, 41]
    caplog.set_level(logging.WARNING, logger="statepool_dagster.live")
    moto_s3.stop()
    try:
        assert not pool.refresh(force=True)
        assert not pool.refresh(force=True)
        assert pool.state_ids() == served
        for _ in range(2):  # a row it could read before in place of one it cannot read now
            row = pool[len(pool) - 1]
            assert row["extra_info"].pop("stand_in_for") == served[-1]
            assert row in rows
    finally:
        moto_s3.start()  # the same port, the same buckets
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "the store cannot be read now" in m]) == 1
    assert len([m for m in messages if f"state {served[-1]} cannot be read now" in m]) == 1

    write_session(sessions, range(30, 33))
    assert pool.refresh(force=True)
    assert pool.state_ids()[: len(served)] == served
    assert [pool[i] for i in range(len(served))] == rows
    assert written(pool[i] for i in range(len(served), len(pool))) == [30, 31, 32]
    assert any("readable again" in m.getMessage() for m in caplog.records)


def test_a_refresh_on_s3_reads_new_segments_at_once_and_lists_the_tables_at_a_pace(on_s3, moto_s3):
    sessions = sessions_copy(on_s3)
    pool = LivePool(
        on_s3.store, sessions, refresh_seconds=0.0, storage_options=moto_s3.storage_options()
    )
    served = pool.state_ids()

    def tables_listed() -> bool:
        return any(r.is_listing and "prompts" in r.query for r in moto_s3.requests)

    write_session(sessions, range(60, 65))
    moto_s3.reset_requests()
    assert pool.refresh()  # right after the open's listing: the segments only
    assert len(pool) == len(served) + 5 and not tables_listed()

    deadline = time.monotonic() + 60
    while not tables_listed() and time.monotonic() < deadline:  # at most a tenth of the time
        time.sleep(0.2)
        pool.refresh()
    assert tables_listed()
