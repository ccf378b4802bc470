"""A small simulated rollout: writer processes appending states derived from the sample runs.

Each worker takes the pool's run states, and at every policy step writes a variant of
some of them (its receipt says which worker and step; one in four is written unchanged,
as two workers reaching the same state would), sealing a segment per step.
"""

from __future__ import annotations

import multiprocessing
import os
import random
from pathlib import Path

from ..core.sessions import StateWriter
from ..core.states.models import CheckpointState

DEMO_SESSION = "demo_session"
DEMO_SPEC = {"model": "demo-curator", "policy_checkpoint": "step-0", "dataset": "ovo"}


def _variant(state: CheckpointState, worker: int, step: int, rng: random.Random) -> CheckpointState:
    if rng.random() < 0.25:
        return state  # reached again: stored once, with a provenance row per copy
    receipt = f"(rollout worker {worker}, policy step {step}: curated {rng.randint(1, 3)} ops)"
    return state.model_copy(
        update={"state_id": f"{state.state_id}_w{worker}s{step}", "last_receipt": receipt}
    )


def _worker(sessions_dir: str, states_json: list[str], worker: int, steps: int) -> None:
    rng = random.Random(worker)
    states = [CheckpointState.from_json(t) for t in states_json]
    with StateWriter(sessions_dir, DEMO_SESSION, spec=DEMO_SPEC, writer=f"demo-w{worker}") as w:
        for step in range(steps):
            for state in rng.sample(states, min(3, len(states))):
                w.append(
                    _variant(state, worker, step, rng),
                    policy_step=step,
                    parent_state_id=state.state_id,
                )
            w.seal()  # one segment per policy step


def simulate_rollout(
    states: list[CheckpointState],
    sessions_dir: str | os.PathLike[str],
    workers: int = 3,
    steps: int = 3,
) -> Path:
    """Run ``workers`` writer processes for ``steps`` policy steps; the session's folder."""
    texts = [s.to_json() for s in states]
    context = multiprocessing.get_context("spawn")  # a clean process, as a rollout worker is
    procs = [
        context.Process(target=_worker, args=(str(sessions_dir), texts, k, steps))
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"demo rollout worker exited with {p.exitcode}")
    return Path(sessions_dir) / DEMO_SESSION
