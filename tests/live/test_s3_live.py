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
from tcpfault import TcpFault

from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs
from statepool_dagster.live import LivePool, PoolUnavailable

from cli_helpers import STATEPOOL, cli_env
from store_helpers import generated_state

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


def through(endpoint: str, **config) -> dict:
    """fsspec options reaching moto's server at ``endpoint`` (the forwarder's)."""
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "skip_instance_cache": True,  # the pool's client is its own, not the writers'
    }
    if config:
        options["config_kwargs"] = config
    return options


def timed(call) -> tuple[float, object]:
    started = time.monotonic()
    try:
        out = call()
    except PoolUnavailable as exc:
        out = exc
    return time.monotonic() - started, out


def check_rows(pool, indices, got) -> None:
    """Every row is the state asked for, or says which state it stands in for."""
    rows = got if isinstance(got, list) else [got]
    for i, row in zip(indices, rows, strict=True):
        if isinstance(row, PoolUnavailable):
            continue
        info = row["extra_info"]
        assert info["state_id"] == pool.state_id(i) or info.get("stand_in_for") == pool.state_id(i)


@pytest.mark.parametrize(
    ("outage", "stand_ins", "with_sessions"),
    [("refuse", False, True), ("refuse", True, False), ("hang", False, False),
     ("hang", True, True)],
)  # fmt: skip
def test_an_outage_costs_each_call_at_most_the_deadline_and_the_pool_catches_up(
    bucket_store, moto_s3, outage, stand_ins, with_sessions
):
    s = bucket_store
    deadline = 1.0
    seal(s.sessions, range(3))
    sync(s.env, s.cwd)
    seal(s.sessions, range(3, 5))  # sealed, not stored: read from the segment
    with TcpFault(moto_s3.port) as fault:
        options = through(fault.endpoint, read_timeout=20, retries={"max_attempts": 2})
        pool = LivePool(
            s.store, s.sessions if with_sessions else None, storage_options=options,
            stand_ins=stand_ins, refresh_seconds=0, read_deadline=deadline,
        )  # fmt: skip
        first = pool.state_ids()
        assert len(first) == SPEC.n_checkpoints + (5 if with_sessions else 3)
        assert [r["extra_info"]["state_id"] for r in pool.rows(range(len(pool)))] == first
        getattr(fault, outage)()
        worst, failed, stood_in = 0.0, 0, 0
        ends = time.monotonic() + 5
        while time.monotonic() < ends:
            for i in range(len(pool)):
                took, row = timed(lambda i=i: pool[i])
                check_rows(pool, [i], row)
                worst = max(worst, took)
                failed += isinstance(row, PoolUnavailable)
                stood_in += (
                    not isinstance(row, PoolUnavailable) and "stand_in_for" in row["extra_info"]
                )
            took, rows = timed(lambda: pool.rows(range(len(pool))))
            worst = max(worst, took)
            if not isinstance(rows, PoolUnavailable):
                check_rows(pool, range(len(pool)), rows)
            worst = max(worst, timed(pool.refresh)[0], timed(lambda: pool.refresh(force=True))[0])
            assert pool.state_ids() == first
        print(f"{outage}: the longest call took {worst:.2f} s")
        # Refused: the TCP check ends a wait in about 0.2 s, well before the deadline (a call
        # alone here takes 0.2 s; a long suite's leftover threads and collections add some).
        assert worst <= (0.75 * deadline if outage == "refuse" else deadline + 0.25)
        assert (failed > 0) != stand_ins and (stood_in > 0) == stand_ins
        seal(s.sessions, range(5, 7))  # sealed while the endpoint is out
        sync(s.env, s.cwd)  # Dagster stores the session meanwhile (not through the fault)
        grown = 2 if with_sessions else 4  # store-only: the two sealed before, stored now
        fault.passing()
        back = time.monotonic()
        while len(pool) < len(first) + grown and time.monotonic() - back < 10:
            pool.refresh()
            time.sleep(0.1)
        print(f"{outage}: sealed states served {time.monotonic() - back:.2f} s after the return")
        assert time.monotonic() - back <= 5
        served = pool.state_ids()
        assert served[: len(first)] == first and len(served) == len(first) + grown
        rows = pool.rows(range(len(pool)))
        assert [r["extra_info"]["state_id"] for r in rows] == served
        assert not any("stand_in_for" in r["extra_info"] for r in rows)
