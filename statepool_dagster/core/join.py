"""Pair each snapshot with the episode batch the curator digested: the seed's rule."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .episodes import EpisodeLine
from .models import CheckpointState
from .snapshots import Snapshot

OFFLINE_RECEIPT = "(collected offline)"


@dataclass(frozen=True)
class JoinedState:
    """A checkpoint state plus where its parts came from."""

    run: str
    version: int
    batch_version: int
    state: CheckpointState


@dataclass(frozen=True)
class SkippedCheckpoint:
    """A snapshot that got no state, and why."""

    version: int
    reason: str


def state_id(run: str, version: int) -> str:
    return f"{run}_ckpt{version}"


def group_batches(episodes: Iterable[EpisodeLine]) -> dict[int, list[dict[str, Any]]]:
    """Episodes by ``skill_lib_version``, in file order."""
    batches: dict[int, list[dict[str, Any]]] = {}
    for episode in episodes:
        batches.setdefault(episode.version, []).append(episode.record)
    return batches


def pick_batch(
    batches: dict[int, list[dict[str, Any]]], version: int
) -> tuple[int, list[dict[str, Any]]] | None:
    """The batch digested at checkpoint ``version``: run under ``version-1``, else ``version``."""
    for candidate in (version - 1, version):
        batch = batches.get(candidate)
        if batch:
            return candidate, batch
    return None


def join_states(
    run: str,
    snapshots: Iterable[Snapshot],
    batches: dict[int, list[dict[str, Any]]],
    dataset: str = "ovo",
) -> tuple[list[JoinedState], list[SkippedCheckpoint]]:
    """One state per snapshot that has a batch; the others are recorded as skipped."""
    states: list[JoinedState] = []
    skipped: list[SkippedCheckpoint] = []
    for snapshot in snapshots:
        k = snapshot.version
        picked = pick_batch(batches, k)
        if picked is None:
            skipped.append(
                SkippedCheckpoint(k, f"no episodes with skill_lib_version {k - 1} or {k}")
            )
            continue
        batch_version, batch = picked
        state = CheckpointState(
            state_id=state_id(run, k),
            dataset=dataset,
            lib_snapshot=snapshot.library,
            episodes=batch,
            analysis=None,
            last_receipt=OFFLINE_RECEIPT,
        )
        states.append(JoinedState(run, k, batch_version, state))
    return states, skipped
