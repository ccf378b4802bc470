"""What the reward functions call: record grades when ``STATEPOOL_FEEDBACK_DIR`` is set.

Groups: TRL hands a reward call its batch with each prompt's answers side by side, so a
group is a run of the same state id in one call. verl scores one answer per call and
tells no step: its answers to one state are grouped by a wall-clock window of
``STATEPOOL_FEEDBACK_GROUP_SECONDS`` (120 s); ``statepool feedback --from-verl-dump``
groups them exactly (one prompt in one step).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import settings_now
from .recorder import active_folder, recorder_for

log = logging.getLogger(__name__)


def _step(trainer_state: Any) -> int | None:
    step = getattr(trainer_state, "global_step", None)
    return step if isinstance(step, int) else None


def record_one(state_id: Any, breakdown: Mapping[str, Any], source: str = "verl") -> None:
    """Queue one graded answer (verl's ``compute_score``); nothing when recording is off."""
    folder = active_folder()
    if folder is None or not isinstance(state_id, str) or not state_id:
        return
    now = time.time()
    window = _window()
    parts = (state_id, "t", int(now // window)) if window > 0 else (uuid.uuid4().hex,)
    _queue(folder, [(parts, state_id, dict(breakdown), now, source, None)])


def _window() -> float:
    return settings_now("feedback_group_seconds").feedback_group_seconds


def record_batch(
    state_ids: Sequence[Any] | None,
    grades: Sequence[Any],
    trainer_state: Any = None,
    source: str = "trl",
) -> None:
    """Queue a TRL reward call's answers (grades with ``breakdown()``).

    A group is a run of one state id in the batch.
    """
    folder = active_folder()
    if folder is None or not state_ids:
        return
    now = time.time()
    step = _step(trainer_state)
    call = uuid.uuid4().hex[:12]
    items = []
    previous, run = None, 0
    for state_id, grade in zip(state_ids, grades, strict=False):
        if not isinstance(state_id, str) or not state_id:
            previous = None
            continue
        if state_id != previous:
            run += 1
            previous = state_id
        items.append(((state_id, step, call, run), state_id, grade.breakdown(), now, source, step))
    if items:
        _queue(folder, items)


def _queue(folder: str, items: list) -> None:
    """Queue; a full disk or a lost mount costs the feedback, never the training step."""
    try:
        recorder_for(folder).queue(items)
    except ValueError as exc:  # the answers that fit their columns are queued
        log.warning("feedback: in %s: %s", folder, exc)
    except OSError as exc:
        log.warning("feedback: %d records not recorded in %s: %s", len(items), folder, exc)
