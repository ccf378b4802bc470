"""The live pool on S3 while Dagster stores sessions beside it, and while the endpoint fails.

moto's S3 server on 127.0.0.1 (tests/s3server.py), reached through a TCP forwarder of the
tests' own (tests/tcpfault.py) that can refuse connections or accept them and never answer:
the real protocol, the real s3fs client, real faults.
"""

from __future__ import annotations

import json
import time
import uuid
from types import SimpleNamespace

import pytest

from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs
from statepool_dagster.live import LivePool

from helpers import STATEPOOL, cli_env, generated_state

pytestmark = pytest.mark.slow  # a server in this process, and `statepool` subprocesses

SPEC = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
SESSION = "rollouts"


def seal(sessions: str, ks: range, writer: str = "w1", session: str = SESSION) -> None:
    with StateWriter(sessions, session, writer=writer) as states:
        for k in ks:
            states.append(generated_state(k), policy_step=k)


def sync(env, cwd) -> dict:
    import subprocess

    done = subprocess.run(
        [str(STATEPOOL), "sync", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def versions(pool, ids) -> list[int]:
    out = []
    for sid in ids:
        row = pool[pool.state_ids().index(sid)]
        out.append(json.loads(row["extra_info"]["state"])["lib_snapshot"]["version"])
    return out


@pytest.fixture
def bucket_store(moto_s3, tmp_path) -> SimpleNamespace:
    bucket = moto_s3.make_bucket(f"pool-{uuid.uuid4().hex[:12]}")
    generate_runs(tmp_path / "runs", SPEC)
    store, sessions = f"{bucket}/store", f"{bucket}/sessions"
    env = cli_env(SimpleNamespace(runs=tmp_path / "runs", store=store), tmp_path / "home")
    env["STATEPOOL_SESSIONS_DIR"] = sessions
    return SimpleNamespace(store=store, sessions=sessions, env=env, cwd=tmp_path)


@pytest.mark.parametrize("with_sessions", [False, True], ids=["store-only", "with-sessions"])
def test_stored_session_states_stay_served_in_place_when_the_session_is_stored_again(
    bucket_store, with_sessions
):
    s = bucket_store
    seal(s.sessions, range(3))
    sync(s.env, s.cwd)
    pool = LivePool(s.store, s.sessions if with_sessions else None)
    assert len(pool) == SPEC.n_checkpoints + 3
    seal(s.sessions, range(10, 12), session="later")  # served after the first session's
    sync(s.env, s.cwd)
    pool.refresh(force=True)
    first = pool.state_ids()
    assert len(first) == SPEC.n_checkpoints + 3 + 2

    seal(s.sessions, range(3, 5))
    sync(s.env, s.cwd)  # another process rewrites session_states/rollouts/.index.json
    for _ in range(5):
        pool.refresh(force=True)
        time.sleep(0.2)
        served = pool.state_ids()
        assert served[: len(first)] == first  # nothing lost, nothing moved
    assert len(served) == len(first) + 2
    assert versions(pool, served[SPEC.n_checkpoints :]) == [0, 1, 2, 10, 11, 3, 4]
    again = LivePool(s.store, s.sessions if with_sessions else None)
    assert sorted(again.state_ids()) == sorted(served)
