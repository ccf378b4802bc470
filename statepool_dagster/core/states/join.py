"""Pair each snapshot with the episode batch the curator digested.

``seed`` (the default) is the original script's rule: library k with the batch run
under k-1 (else k). ``pre_curation`` gives checkpoint k what the curator really saw
before producing library k: library k-1 and the batch run under it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..runs.episodes import EpisodeLine
from ..runs.snapshots import Snapshot
from .models import CheckpointState
from .reference_ops import next_version_after, reference_ops

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


@dataclass(frozen=True)
class PlannedState:
    """Which inputs checkpoint ``version``'s state is built from (versions only, no data)."""

    version: int
    library_version: int
    batch_version: int
    next_version: int | None  # the library after this one: the reference ops' target
    followup_version: int | None  # the batch followup fields come from; None: no followup


def _pair(
    k: int, libraries: Collection[int], batches: Collection[int], pairing: Pairing
) -> tuple[int, int] | str:
    """``(library_version, batch_version)`` for checkpoint ``k``, or why there is none.

    ``batches`` holds the versions that have a non-empty batch.
    """
    if pairing == "seed":
        for candidate in (k - 1, k):
            if candidate in batches:
                return k, candidate
        return f"no episodes with skill_lib_version {k - 1} or {k}"
    if k - 1 not in libraries:
        if k == 0:
            return "pre_curation: checkpoint 0 has no earlier library"
        return f"pre_curation: no library version {k - 1} (skills_v{k - 1}.json)"
    if k - 1 not in batches:
        return f"pre_curation: no episodes with skill_lib_version {k - 1}"
    return k - 1, k - 1


def plan_states(
    versions: Sequence[int],
    batch_versions: Collection[int],
    *,
    pairing: Pairing = "seed",
    followup: Followup = "none",
) -> tuple[list[PlannedState], list[SkippedCheckpoint]]:
    """The pairing for each snapshot version (in the order given), or why it has none."""
    ordered = sorted(versions)
    planned: list[PlannedState] = []
    skipped: list[SkippedCheckpoint] = []
    for k in versions:
        paired = _pair(k, versions, batch_versions, pairing)
        if isinstance(paired, str):
            skipped.append(SkippedCheckpoint(k, paired))
            continue
        library_version, batch_version = paired
        followup_version = {"none": None, "batch": batch_version, "next_batch": k}[followup]
        next_version = next_version_after(ordered, library_version)
        planned.append(
            PlannedState(k, library_version, batch_version, next_version, followup_version)
        )
    return planned, skipped


@dataclass(frozen=True)
class StateFields:
    """A planned state's fields besides its library and batch (which may still be text)."""

    state_id: str
    analysis: dict[str, Any] | None
    last_receipt: str
    followup_qids: list[str]
    gt_map: dict[str, Any]


def state_fields(
    run: str,
    plan: PlannedState,
    followup_batch: list[dict[str, Any]],
    analyses: Mapping[int, dict[str, Any]] | None = None,
    receipts: Mapping[int, str] | None = None,
) -> StateFields:
    """Id, sidecars and followup of ``plan``'s state (``followup_batch``: its followup batch)."""
    k = plan.version
    qids, gt_map = (
        followup_fields(followup_batch) if plan.followup_version is not None else ([], {})
    )
    return StateFields(
        state_id(run, k),
        (analyses or {}).get(k),
        (receipts or {}).get(k, OFFLINE_RECEIPT),
        qids,
        gt_map,
    )


def build_state(
    run: str,
    plan: PlannedState,
    libraries: Mapping[int, dict[str, Any]],
    batches: Mapping[int, list[dict[str, Any]]],
    dataset: str = "ovo",
    analyses: Mapping[int, dict[str, Any]] | None = None,
    receipts: Mapping[int, str] | None = None,
) -> JoinedState:
    """The state ``plan`` describes, from the decoded libraries and batches it names."""
    k = plan.version
    followup = batches.get(plan.followup_version, []) if plan.followup_version is not None else []
    fields = state_fields(run, plan, followup, analyses, receipts)
    library = libraries[plan.library_version]
    state = CheckpointState(
        state_id=fields.state_id,
        dataset=dataset,
        lib_snapshot=library,
        episodes=batches[plan.batch_version],
        analysis=fields.analysis,
        last_receipt=fields.last_receipt,
        followup_qids=fields.followup_qids,
        gt_map=fields.gt_map,
    )
    nxt = plan.next_version
    ops = reference_ops(library, nxt, None if nxt is None else libraries[nxt])
    return JoinedState(run, k, plan.batch_version, state, plan.library_version, reference_ops=ops)


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
    libraries = {s.version: s.library for s in snapshots}
    planned, skipped = plan_states(
        list(libraries), {v for v, b in batches.items() if b}, pairing=pairing, followup=followup
    )
    states = [
        build_state(run, plan, libraries, batches, dataset, analyses, receipts) for plan in planned
    ]
    return states, skipped
