"""Pair each snapshot with the episode batch the curator digested.

``seed`` (the default) is the original script's rule: library k with the batch run
under k-1 (else k). ``pre_curation`` gives checkpoint k what the curator really saw
before producing library k: library k-1 and the batch run under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .episodes import EpisodeLine
from .models import CheckpointState
from .reference_ops import next_version_after, reference_ops
from .snapshots import Snapshot

OFFLINE_RECEIPT = "(collected offline)"

Pairing = Literal["seed", "pre_curation"]
Followup = Literal["none", "batch", "next_batch"]


@dataclass(frozen=True)
class JoinedState:
    """A checkpoint state plus where its parts came from."""

    run: str
    version: int
    batch_version: int
    state: CheckpointState
    library_version: int | None = None  # None: the checkpoint's own, as the seed pairs
    reference_ops: dict[str, Any] | None = None


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


def followup_fields(batch: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """``(qids, {qid: gt})`` for the batch's episodes that have an id, first occurrence kept."""
    qids: list[str] = []
    gt_map: dict[str, Any] = {}
    for episode in batch:
        if episode.get("id") is None:
            continue
        qid = str(episode["id"])
        if qid not in gt_map:
            qids.append(qid)
            gt_map[qid] = episode.get("gt")
    return qids, gt_map


def _pair(
    k: int,
    libraries: Mapping[int, dict[str, Any]],
    batches: dict[int, list[dict[str, Any]]],
    pairing: Pairing,
) -> tuple[int, int, list[dict[str, Any]]] | str:
    """``(library_version, batch_version, batch)`` for checkpoint ``k``, or why there is none."""
    if pairing == "seed":
        picked = pick_batch(batches, k)
        if picked is None:
            return f"no episodes with skill_lib_version {k - 1} or {k}"
        return k, *picked
    if k - 1 not in libraries:
        if k == 0:
            return "pre_curation: checkpoint 0 has no earlier library"
        return f"pre_curation: no library version {k - 1} (skills_v{k - 1}.json)"
    batch = batches.get(k - 1)
    if not batch:
        return f"pre_curation: no episodes with skill_lib_version {k - 1}"
    return k - 1, k - 1, batch


def join_states(
    run: str,
    snapshots: Iterable[Snapshot],
    batches: dict[int, list[dict[str, Any]]],
    dataset: str = "ovo",
    *,
    pairing: Pairing = "seed",
    followup: Followup = "none",
    analyses: Mapping[int, dict[str, Any]] | None = None,
    receipts: Mapping[int, str] | None = None,
) -> tuple[list[JoinedState], list[SkippedCheckpoint]]:
    """One state per checkpoint that can be paired; the others are recorded as skipped.

    ``analyses`` / ``receipts`` (by checkpoint) fill ``analysis`` and ``last_receipt``;
    ``followup`` fills ``followup_qids`` and ``gt_map`` from the state's own batch
    (``batch``) or the batch run under library k, after curation (``next_batch``).
    """
    snapshots = list(snapshots)
    libraries = {s.version: s.library for s in snapshots}
    versions = sorted(libraries)
    analyses = analyses or {}
    receipts = receipts or {}
    states: list[JoinedState] = []
    skipped: list[SkippedCheckpoint] = []
    for snapshot in snapshots:
        k = snapshot.version
        paired = _pair(k, libraries, batches, pairing)
        if isinstance(paired, str):
            skipped.append(SkippedCheckpoint(k, paired))
            continue
        library_version, batch_version, batch = paired
        qids: list[str] = []
        gt_map: dict[str, Any] = {}
        if followup != "none":
            followup_batch = batch if followup == "batch" else batches.get(k, [])
            qids, gt_map = followup_fields(followup_batch)
        state = CheckpointState(
            state_id=state_id(run, k),
            dataset=dataset,
            lib_snapshot=libraries[library_version],
            episodes=batch,
            analysis=analyses.get(k),
            last_receipt=receipts.get(k, OFFLINE_RECEIPT),
            followup_qids=qids,
            gt_map=gt_map,
        )
        next_version = next_version_after(versions, library_version)
        ops = reference_ops(
            libraries[library_version],
            next_version,
            None if next_version is None else libraries[next_version],
        )
        states.append(JoinedState(run, k, batch_version, state, library_version, reference_ops=ops))
    return states, skipped
