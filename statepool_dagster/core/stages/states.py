"""``checkpoint_states``: the join, one checkpoint at a time, also written as state files.

Each state is keyed by a digest of everything it is built from (its library, the next
library, its batch, its sidecars, the settings), computed from the digests the upstream
parts record, so a state whose key is stored is neither read nor written again. Only
the libraries and batches of the states being built are read, one checkpoint at a time:
memory holds a few libraries, never the run.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import msgspec

from ..config import Settings
from ..names import EPISODES, IGNORED_SIDECARS, SNAPSHOTS, STATES, RejectSource
from ..runs.opening import SidecarsRead, read_sidecars
from ..states.digest import decode_noting_floats, pieces_digest, state_text_digest
from ..states.join import PlannedState, SkippedCheckpoint, join_checkpoint, plan_states
from ..states.models import BytesLike
from ..states.reference_ops import CardIndex, cards_by_id, op_counts, ops_json
from ..store.layout import file_digest, state_pool_names, update_state_pool, write_state_file
from ..store.part_files import part_name
from ..store.parts import RunTable
from ..store.rows import LARGE, StateRow, release_arrow_memory, utf8_views
from .job import (
    STATE_VERSION,
    TABLE_FORMAT,
    OpenTables,
    StageReport,
    combined,
    digest,
    digest_pieces,
    run_folder,
)
from .prompts import PromptHandOver, RenderedPrompts
from .runner import Stage, StagePass, preview

PREVIEW = ["state_id", "version", "batch_version", "n_cards", "n_episodes"]
# A state's rejects are its sidecars' (the join keeps a bad record, never sets it aside).
STAGE = Stage(STATES, RejectSource.SIDECARS, preview(PREVIEW), "sidecar_reject_details")
_encode = msgspec.json.Encoder().encode
NO_INPUT = digest("0")  # what a state key holds for no library or batch (computed once)


class CheckpointInputs:
    """A stored run's libraries and batches, read part by part when a state needs them.

    The join's ``CheckpointSource`` over the store; the part digests key the states.
    """

    def __init__(self, snapshots: RunTable, episodes: RunTable, keep: int = 3):
        self.snapshots, self.episodes = snapshots, episodes
        # version -> the library decoded, and whether it is fit to digest from its pieces
        self._decoded: OrderedDict[int, tuple[dict[str, Any], bool]] = OrderedDict()
        self._cards: dict[int, CardIndex] = {}  # the decoded ones' cards, by id
        self._keep = keep

    def library_versions(self) -> list[int]:
        return [p.info["version"] for _, p in sorted(self.snapshots.parts.items())]

    def batch_versions(self) -> set[int]:
        return {p.info["version"] for p in self.episodes.parts.values() if p.info["rows"]}

    def library_digest(self, version: int | None) -> str:
        if version is None:
            return NO_INPUT
        return self.snapshots.parts[part_name(version)].info["library"]

    def batch_digest(self, version: int | None) -> str:
        part = None if version is None else self.episodes.parts.get(part_name(version))
        return NO_INPUT if part is None else part.info["batch"]

    def n_cards(self, version: int) -> int:
        return self.snapshots.parts[part_name(version)].info["n_cards"]

    def library_text(self, version: int) -> memoryview:
        """The library's stored text as UTF-8, viewed where Arrow holds it."""
        library = self.snapshots.read_part(part_name(version), ["library"])["library"]
        return utf8_views(library)[0]

    def batch_texts(self, version: int | None) -> list[memoryview]:
        """The batch's stored records as UTF-8, viewed where Arrow holds them (never copied)."""
        if version is None or part_name(version) not in self.episodes.parts:
            return []
        records = self.episodes.read_part(part_name(version), ["record"])["record"]
        release_arrow_memory(records.nbytes)  # the pages it was read from
        return utf8_views(records)

    def library(self, version: int) -> dict[str, Any]:
        """A decoded library (the last few are kept: consecutive states share them)."""
        return self._library(version)[0]

    def cards(self, version: int) -> CardIndex:
        """A decoded library's cards by id (the reference ops' index: a library is the next
        one of a state and the own one of the state after it)."""
        library = self.library(version)
        if version not in self._cards:
            self._cards[version] = cards_by_id(library)
        return self._cards[version]

    def _library(self, version: int) -> tuple[dict[str, Any], bool]:
        if version not in self._decoded:
            self._decoded[version] = decode_noting_floats(self.library_text(version))
            while len(self._decoded) > self._keep:
                dropped, _ = self._decoded.popitem(last=False)
                self._cards.pop(dropped, None)
        self._decoded.move_to_end(version)
        return self._decoded[version]

    def digest_and_batch(
        self, library_version: int, batch: Sequence[BytesLike]
    ) -> tuple[bytes | None, list[Any] | None]:
        """The digest of the state joined from a library and a batch's texts, from the library
        already decoded and the batch decoded once more (``None``: digest the state's text),
        and the batch decoded (``None`` where it was not), for the state's prompt."""
        library, plain = self._library(library_version)
        if not plain:
            return None, None
        episodes = []
        for text in batch:
            episode, plain = decode_noting_floats(text)
            if not plain:
                return None, None
            episodes.append(episode)
        return pieces_digest(library, episodes), episodes


_plan_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(PlannedState)))


def state_key(settings_key: str, plan: PlannedState, inputs: CheckpointInputs, sidecars) -> str:
    """Digest of every input of one state, by the digests its upstream parts record."""
    k = plan.version
    analysis = sidecars.analyses.get(k)
    # The same text as repr(dataclasses.astuple(plan)), without its deep copy: stored keys hold.
    fields = _plan_fields(plan)
    return digest(
        settings_key,
        repr(fields),
        inputs.library_digest(plan.library_version),
        inputs.library_digest(plan.next_version),
        inputs.batch_digest(plan.batch_version),
        inputs.batch_digest(plan.followup_version),
        "" if analysis is None else _encode(analysis).decode("utf-8"),
        repr(sidecars.receipts.get(k)),
    )


def build_states(
    run: str, settings: Settings, tables: OpenTables, handover: RenderedPrompts | None = None
) -> StageReport:
    """``checkpoint_states``: snapshot k joined with the batch run under k-1 (else k).

    ``handover``: where to render the new states' prompts, when the step's prompts stage
    follows.
    """
    layout = tables.layout
    snapshots, episodes = tables.open(SNAPSHOTS, run), tables.open(EPISODES, run)
    fingerprint = combined(
        episodes.marks.get("fingerprint", ""), snapshots.marks.get("fingerprint", "")
    )
    sidecars = read_sidecars(run_folder(settings, run), run, strict=settings.strict)
    inputs = CheckpointInputs(snapshots, episodes)
    planned, skipped = plan_states(
        inputs.library_versions(),
        inputs.batch_versions(),
        pairing=settings.pairing,
        followup=settings.followup,
    )
    stage = StagePass(STAGE, run, tables)
    stage.rejects = sidecars.rejects
    settings_key = digest(STATE_VERSION, TABLE_FORMAT, run, settings.dataset, settings.pairing)
    on_disk = state_pool_names(layout, run)
    writes: dict[str, memoryview] = {}
    fresh: dict[str, str] = {}  # digests of the state files written one by one (manifests)
    manifest = not layout.local  # a local folder has none: no digest to compute
    sidecar_maps = (sidecars.analyses, sidecars.receipts)
    handing = PromptHandOver(run, tables, handover)
    for plan in planned:
        name = part_name(plan.version)
        key = state_key(settings_key, plan, inputs, sidecars)
        if stage.reuse(name, key):
            if stage.table.parts[name].info["state_id"] not in on_disk:  # deleted by hand
                state = stage.table.read_part(name, ["state"])["state"]
                writes[stage.table.parts[name].info["state_id"]] = utf8_views(state)[0]
            continue
        part = stage.stored(name)
        joined = join_checkpoint(run, settings.dataset, plan, inputs, *sidecar_maps)
        sid, data, ops = joined.state_id, joined.data, ops_json(joined.reference_ops)
        info = {
            "state_id": sid,
            "rows": 1,
            "text": digest_pieces([(data,)]),
            "ops": op_counts(joined.reference_ops),  # what the report plots
        }
        episodes = None  # the batch decoded, once for the digest and the prompt
        if len(data) < LARGE:  # the digest holds the state's library and batch encoded again
            batch = joined.parts[1] if joined.parts is not None else None
            found = None
            if batch is not None:
                found, episodes = inputs.digest_and_batch(plan.library_version, batch)
            # what the export de-duplicates by
            info["digest"] = (found or state_text_digest(data)).hex()
        decoded = functools.partial(joined.decoded, episodes)
        handing.offer(name, key, info["text"], decoded, plan, ops)
        del decoded, episodes  # they hold the joined state and its batch: let go below
        n_episodes = joined.n_episodes
        del joined  # and the batch it was joined from
        release_arrow_memory(len(data))
        row = StateRow(
            state_id=sid,
            run=run,
            version=plan.version,
            library_version=plan.library_version,
            batch_version=plan.batch_version,
            n_cards=inputs.n_cards(plan.library_version),
            n_episodes=n_episodes,
            state=data,
            reference_ops=ops,
            input_key=key,
        )
        same_text = part is not None and part.info.get("text") == info["text"]
        stage.write_row(name, row, key, info)
        if not (same_text and sid in on_disk):  # e.g. only the reference ops moved on
            write_state_file(layout, run, sid, data)
            fresh[sid] = file_digest(data) if manifest else ""
        del row, data
    stage.finish(fingerprint)
    state_ids = {info["state_id"] for info in stage.infos()}
    present = on_disk | fresh.keys()  # we hold the run's lock: nobody else wrote meanwhile
    update_state_pool(layout, run, writes, state_ids, fresh, present)
    return _report(stage, settings, skipped, sidecars)


def _report(
    stage: StagePass,
    settings: Settings,
    skipped: list[SkippedCheckpoint],
    sidecars: SidecarsRead,
) -> StageReport:
    return stage.report(
        {
            "states": len(stage.kept),
            "reused": stage.reused,
            "skipped_checkpoints": len(skipped),
            "pairing": settings.pairing,
            "followup": settings.followup,
            "analyses": len(sidecars.analyses),
            "receipts": len(sidecars.receipts),
            "sidecar_rejects": len(sidecars.rejects),
        },
        rows=len(stage.kept),
        json={
            "skipped": {str(s.version): s.reason for s in skipped},
            IGNORED_SIDECARS: dict(sidecars.ignored),
        },
    )
