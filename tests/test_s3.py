"""The store and the sessions folder on S3, through s3fs, against moto's S3 server on 127.0.0.1.

The server (tests/s3server.py) speaks the S3 protocol over HTTP: no rename, listings by
prefix, ETags, whole-object puts. Everything here must equal what the local store holds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import instance_for_test

from statepool_dagster.cli.session_sync import sync_sessions
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.config import Settings
from statepool_dagster.core.export.rows import FORMATS
from statepool_dagster.core.export.write import export_store
from statepool_dagster.core.locations import as_path, upload_tree
from statepool_dagster.core.segments import list_segments
from statepool_dagster.core.segments.names import segment_name
from statepool_dagster.core.segments.reader import iter_segment_lines
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.spec import SessionSpecMismatch
from statepool_dagster.core.store.atomic import put_new
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from helpers import STATEPOOL, assert_same_store, cli_env, generated_state

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
        assert not sync(i).failed
        assert [o.ok for o in sync_sessions(i, Settings.from_env())] == [True]
    return SimpleNamespace(runs=root / "runs", sessions=root / "sessions", store=root / "store")


def statepool(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(STATEPOOL), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


def test_sync_and_export_on_s3_write_what_the_local_store_holds(local, s3_bucket, tmp_path):
    store, sessions = f"{s3_bucket}/store", f"{s3_bucket}/sessions"
    upload_tree(local.sessions, as_path(sessions))  # the same segment bytes as the local one
    env = cli_env(SimpleNamespace(runs=local.runs, store=store), tmp_path / "home")
    env["STATEPOOL_SESSIONS_DIR"] = sessions  # AWS_ENDPOINT_URL etc. come from s3_bucket

    first = json.loads(statepool(env, tmp_path, "sync", "--json").stdout)
    assert (first["new"], first["failed"]) == (SPEC.n_runs, 0)
    assert_same_store(store, local.store)
    again = json.loads(statepool(env, tmp_path, "sync", "--json").stdout)
    assert (again["unchanged"], again["states_written"]) == (SPEC.n_runs, 0)

    for fmt in FORMATS:
        export_store(local.store, fmt, tmp_path / "expected" / fmt)
        statepool(
            env, tmp_path, "export", "--format", fmt, "--store", store, "--out", str(tmp_path / fmt)
        )
        assert_same_store(tmp_path / fmt, tmp_path / "expected" / fmt)
    out = f"{s3_bucket}/exports/verl"
    for _ in range(2):  # the second replaces the first in place
        statepool(env, tmp_path, "export", "--format", "verl", "--store", store, "--out", out)
        assert_same_store(out, tmp_path / "expected" / "verl")


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
