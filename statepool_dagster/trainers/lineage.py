"""What a trainer checkpoint trained on: the states drawn, their sources and their rewards.

Read from what is kept already, never from a log of its own:

- a TRL checkpoint (``checkpoint-<step>/statepool_cursor.json``, written by
  ``LivePoolCheckpoint``): the states drawn are those its cursor had served, a bitmap over
  its pool version;
- a verl checkpoint (``global_step_<n>/data.pt``): the live dataset's state names the pool
  version and which state each index serves, not which were drawn; the states drawn are
  those verl's feedback records (``compute_score`` with a step, or an imported rollout dump)
  name at a step ≤ n.

Each state's source (a run's checkpoint, or a session's writer and policy step) comes from
the pool's index opened as of that version; its rewards from the feedback segments, read a
line at a time (:mod:`..core.feedback.recorded`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..core import StatepoolError
from ..core.feedback import FeedbackRecord, Recorded, RecordedRewards, recorded_rewards
from ..live import LivePool, StateSource, VersionGone
from .cursor import CursorError, check_cursor, served_positions
from .trl import CURSOR_FILE, load_cursor
from .verl_checkpoint import DATA_FILE, LATEST_FILE, checkpoint_folder

TRL, VERL = "trl", "verl"
FEEDBACK_SOURCES = {TRL: ("trl",), VERL: ("verl", "verl-dump")}  # what each trainer records
_STEP = {TRL: re.compile(r"checkpoint-(\d+)"), VERL: re.compile(r"global_step_(\d+)")}

# Why a record is not counted for the checkpoint (the keys of ``left_out``).
OTHER_SOURCE = "of another source"
NO_STEP = "with no step"
LATER = "after the checkpoint"
NOT_DRAWN = "for a state the cursor had not served"


@dataclass(frozen=True)
class Checkpoint:
    """A trainer checkpoint as lineage reads it: its trainer, step and saved pool state."""

    folder: Path
    trainer: str  # TRL or VERL
    step: int | None
    state: dict[str, Any]  # the cursor (TRL) or the live dataset's state (verl), checked whole


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The checkpoint in folder ``path``; a :class:`StatepoolError` in one line when there is
    none or its saved state cannot be taken up."""
    folder = Path(path).absolute()
    if not folder.exists():
        raise StatepoolError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise StatepoolError(f"{folder}: a file, not a checkpoint folder")
    if (folder / CURSOR_FILE).is_file():
        try:
            cursor = load_cursor(folder)
        except CursorError as exc:
            raise StatepoolError(str(exc)) from None
        return Checkpoint(folder, TRL, _trl_step(folder), cursor)
    found = checkpoint_folder(folder)
    if found is None:
        raise StatepoolError(
            f"{folder}: not a trainer checkpoint: no {CURSOR_FILE} (TRL with "
            f"LivePoolCheckpoint) and no {DATA_FILE} or {LATEST_FILE} (verl)"
        )
    match = _STEP[VERL].fullmatch(found.name)
    if match is None:
        raise StatepoolError(f"{found}: a verl checkpoint folder is named global_step_<n>")
    return Checkpoint(found, VERL, int(match[1]), _verl_state(found / DATA_FILE))


def _trl_step(folder: Path) -> int | None:
    """The step of a ``checkpoint-<step>`` folder, else the one its ``trainer_state.json``
    gives."""
    match = _STEP[TRL].fullmatch(folder.name)
    if match is not None:
        return int(match[1])
    try:
        step = json.loads((folder / "trainer_state.json").read_bytes()).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _verl_state(path: Path) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        raise StatepoolError(
            f"{path}: reading verl's {DATA_FILE} needs torch (the trainer extra): run "
            "statepool where the trainer's packages are installed"
        ) from None
    import pickle
    import zipfile

    try:
        saved = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError,
            zipfile.BadZipFile) as exc:  # fmt: skip
        raise StatepoolError(f"{path}: not readable as a checkpoint ({exc})") from None
    state = saved.get("dataset_state") if isinstance(saved, dict) else None
    if state is None:
        raise StatepoolError(f"{path}: no live dataset state in it (LiveRLDataset's)")
    try:
        check_cursor(state)
    except CursorError as exc:
        raise StatepoolError(f"{path}: {exc}") from None
    return state


@dataclass(frozen=True)
class DrawnState:
    """One state the checkpoint trained on."""

    state_id: str
    position: int | None  # in the pool version's order; None: not in that version
    source: StateSource | None  # None: not served now (gone from the store since)
    changed_since: bool  # its row changed since the version (a run synced again)
    rewards: Recorded

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_id": self.state_id,
            "position": self.position,
            "source": None if self.source is None else self.source.to_dict(),
            "served_now": self.source is not None,
            "changed_since": self.changed_since,
            "rewards": {
                **asdict(self.rewards),
                "mean": self.rewards.mean if self.rewards.count else None,
            },
        }


@dataclass(frozen=True)
class Lineage:
    """What ``statepool lineage`` reports of one checkpoint."""

    checkpoint: Checkpoint
    store: str
    version: str
    version_states: int
    drawn_from: str  # the evidence of the states drawn, in a sentence
    rewards_from: str  # the evidence of their rewards
    draws: int | None  # draws by the checkpoint (the cursor counts them; verl's does not)
    states: list[DrawnState]
    feedback: RecordedRewards

    def to_dict(self) -> dict[str, Any]:
        feedback = self.feedback
        return {
            "checkpoint": str(self.checkpoint.folder),
            "trainer": self.checkpoint.trainer,
            "step": self.checkpoint.step,
            "store": self.store,
            "version": self.version,
            "version_states": self.version_states,
            "drawn_from": self.drawn_from,
            "rewards_from": self.rewards_from,
            "draws": self.draws,
            "feedback": {
                "folder": feedback.folder,
                "segments": feedback.segments,
                "records": feedback.records,
                "counted": feedback.kept,
                "left_out": feedback.left_out,
                "bad_lines": feedback.bad_lines,
            },
            "states": [s.to_dict() for s in self.states],
        }


def lineage(
    checkpoint: Checkpoint,
    store: str,
    feedback: str,
    sessions: str | None = None,
) -> Lineage:
    """The states ``checkpoint`` trained on, their sources in the pool of ``store`` (with
    the sealed segments of ``sessions``) and their rewards in the ``feedback`` folder."""
    state, trainer, step = checkpoint.state, checkpoint.trainer, checkpoint.step
    pool = _pool_as_of(store, sessions, state)
    ids = pool.as_of.state_ids
    at = {sid: i for i, sid in enumerate(ids)}
    sources = FEEDBACK_SOURCES[trainer]
    if trainer == TRL:
        try:
            drawn = [ids[i] for i in served_positions(state, len(ids))]
        except CursorError as exc:
            raise StatepoolError(f"{checkpoint.folder / CURSOR_FILE}: {exc}") from None
        served = set(drawn)
        drawn_from = (
            f"the cursor ({CURSOR_FILE}): the states served by draw {state['drawn']}, a "
            f"bitmap over pool version {state['version']}"
        )
        # TRL gives a reward call the steps done before it: step c's rewards carry c - 1.
        last = None if step is None else step - 1
        bound = "any step" if step is None else f"a step < {step}"
    else:
        served, last = None, step
        bound = f"a step ≤ {step}"
        drawn_from = (
            f"the feedback records of verl ({', '.join(sources)}) with {bound}: {DATA_FILE} "
            f"names pool version {state['version']} and the state at each index, not "
            "which were drawn"
        )

    def keep(record: FeedbackRecord) -> str | None:
        if record.source not in sources:
            return OTHER_SOURCE
        if record.step is None:
            return NO_STEP
        if last is not None and record.step > last:
            return LATER
        if served is not None and record.state_id not in served:
            return NOT_DRAWN
        return None

    read = recorded_rewards(feedback, keep)
    if trainer == VERL:
        drawn = sorted(
            read.states,
            key=lambda sid: (read.states[sid].first_step, at.get(sid, len(ids)), sid),
        )
    changed = set(pool.changed_since)
    states = []
    for sid in drawn:
        rewards = read.states.get(sid) or Recorded()
        states.append(DrawnState(sid, at.get(sid), pool.source(sid), sid in changed, rewards))
    rewards_from = f"the feedback records in {feedback} from {', '.join(sources)} with {bound}"
    if trainer == TRL:
        rewards_from += " (TRL gives each reward call the steps done before it)"
    return Lineage(
        checkpoint=checkpoint,
        store=store,
        version=state["version"],
        version_states=len(ids),
        drawn_from=drawn_from,
        rewards_from=rewards_from,
        draws=state["drawn"] if trainer == TRL else None,
        states=states,
        feedback=read,
    )


def _pool_as_of(store: str, sessions: str | None, state: dict[str, Any]) -> LivePool:
    """The pool's index as of the checkpoint's version (its warning about rows changed since
    is left out: the report names them state by state)."""
    quiet = logging.getLogger(LivePool.__module__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return LivePool(store, sessions, as_of=state["version"], refresh_seconds=0.0)
    except VersionGone as exc:
        if str(state["store"]) != str(store):
            raise StatepoolError(
                f"pool version {state['version']} is not in {store} (the checkpoint was "
                f"saved on the store {state['store']})"
            ) from None
        raise StatepoolError(str(exc)) from None
    except ValueError as exc:
        raise StatepoolError(str(exc)) from None
    finally:
        quiet.setLevel(level)
