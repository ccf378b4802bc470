"""Pair each snapshot with the episode batch the curator digested.

``seed`` (the default) is the original script's rule: library k with the batch run
under k-1 (else k). ``pre_curation`` gives checkpoint k what the curator really saw
before producing library k: library k-1 and the batch run under it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal, Protocol

from ..names import run_state_id
from .models import BytesLike, CheckpointState, decode_stored, state_bytes
from .reference_ops import CardIndex, reference_ops

OFFLINE_RECEIPT = "(collected offline)"

Pairing = Literal["seed", "pre_curation"]
Followup = Literal["none", "batch", "next_batch"]


@dataclass(frozen=True)
class SkippedCheckpoint:
    """A snapshot that got no state, and why."""

    version: int
    reason: str


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
    ordered, libraries, batches = sorted(versions), set(versions), set(batch_versions)
    after = dict(pairwise(ordered))  # each library's next one
    follow = ("none", "batch", "next_batch").index(followup)
    planned: list[PlannedState] = []
    skipped: list[SkippedCheckpoint] = []
    for k in versions:
        paired = _pair(k, libraries, batches, pairing)
        if isinstance(paired, str):
            skipped.append(SkippedCheckpoint(k, paired))
            continue
        library_version, batch_version = paired
        followup_version = (None, batch_version, k)[follow]
        next_version = after.get(library_version)
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
        run_state_id(run, k),
        (analyses or {}).get(k),
        (receipts or {}).get(k, OFFLINE_RECEIPT),
        qids,
        gt_map,
    )


class CheckpointSource(Protocol):
    """Where a run's libraries and batches come from, by version, as the state files' text
    (or that text's UTF-8 bytes).

    A run folder read into the store is the source (``stages/states.py``), for the assets,
    ``statepool sync`` and ``compat.collect_from_run`` alike: every caller feeds the same join.
    """

    def library_text(self, version: int) -> str | BytesLike: ...

    def batch_texts(self, version: int | None) -> Sequence[str | BytesLike]: ...

    def library(self, version: int) -> dict[str, Any]: ...

    def cards(self, version: int) -> CardIndex: ...


@dataclass(frozen=True)
class JoinedCheckpoint:
    """One joined state: its file's bytes exactly as the original writes them, and its ops."""

    state_id: str
    version: int
    library_version: int
    batch_version: int
    data: bytes
    reference_ops: dict[str, Any]
    n_episodes: int
    # What ``decoded`` builds the state from: the library as the source keeps it decoded,
    # the batch's texts, the other fields.
    parts: tuple[dict[str, Any], Sequence[str | BytesLike], StateFields, str] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def state(self) -> CheckpointState:
        return CheckpointState.from_json(self.data)

    def decoded(self, episodes: list[Any] | None = None) -> CheckpointState:
        """:attr:`state` without validation, built from the decoded parts (the library as the
        source keeps it: read it, never change it), not from the text.

        Without indentation a value's JSON is the same alone and nested, so decoding
        ``data`` gives exactly these values; the parts are decoded once, the state never.
        ``episodes``: the batch's texts already decoded, as :func:`decode_stored` decodes them.
        """
        if self.parts is None:
            return CheckpointState.trusted(self.data)
        library, batch, fields, dataset = self.parts
        if episodes is None:
            episodes = [decode_stored(t) for t in batch]
        return CheckpointState.model_construct(
            state_id=fields.state_id,
            dataset=dataset,
            lib_snapshot=library,
            episodes=episodes,
            analysis=fields.analysis,
            last_receipt=fields.last_receipt,
            followup_qids=fields.followup_qids,
            gt_map=fields.gt_map,
        )


def join_checkpoint(
    run: str,
    dataset: str,
    plan: PlannedState,
    source: CheckpointSource,
    analyses: Mapping[int, dict[str, Any]] | None = None,
    receipts: Mapping[int, str] | None = None,
) -> JoinedCheckpoint:
    """The one join: the state ``plan`` describes, from the texts ``source`` holds."""
    followup = [decode_stored(t) for t in source.batch_texts(plan.followup_version)]
    fields = state_fields(run, plan, followup, analyses, receipts)
    batch = source.batch_texts(plan.batch_version)
    data = state_bytes(
        fields.state_id,
        dataset,
        source.library_text(plan.library_version),
        batch,
        fields.analysis,
        fields.last_receipt,
        fields.followup_qids,
        fields.gt_map,
    )
    nxt = plan.next_version
    library = source.library(plan.library_version)
    following = None if nxt is None else source.library(nxt)
    indexes = None if nxt is None else (source.cards(plan.library_version), source.cards(nxt))
    ops = reference_ops(library, nxt, following, indexes)
    return JoinedCheckpoint(
        fields.state_id,
        plan.version,
        plan.library_version,
        plan.batch_version,
        data,
        ops,
        len(batch),
        (library, batch, fields, dataset),
    )
