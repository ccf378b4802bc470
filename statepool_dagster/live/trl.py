"""A ``datasets.IterableDataset`` over the live pool for TRL's ``GRPOTrainer``.

Rows have the columns of ``statepool export --format trl`` (and ``weight`` when a
weight is asked for), each read from the pool's index when it is served. The stream never
ends (set ``max_steps``) and refreshes the pool as it goes: a state sealed or synced after
training started is served next, before any state is served again; then round robin in
the pool's order (or a draw by weight); a state the selection leaves out is no longer
served. Use it with ``GRPOConfig(shuffle_dataset=False)``: TRL's shuffle buffer would
hold new states back.
"""

from __future__ import annotations

import json
import os
import random
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from ..core.export.rows import ExportRow
from ..core.feedback.select import SelectionOptions
from .pool import LivePool
from .unavailable import PoolUnavailable

WAIT_SECONDS = 1.0  # an empty pool is polled this often


def trl_row(row: ExportRow, weight: float | None, with_weight: bool) -> dict[str, Any]:
    """One row as ``statepool export --format trl`` writes it."""
    state = json.loads(row.state)
    out = {
        "prompt": row.messages(),
        "state_id": row.state_id,
        "run": row.run,
        "version": row.version,
        "ground_truth": row.ground_truth(),
        "reference_ops": row.reference_ops,
        "followup_qids": [str(q) for q in state.get("followup_qids", [])],
        "gt_map": json.dumps(state.get("gt_map", {}), ensure_ascii=False),
        "state": row.state,
        "source": row.source,  # runs or sessions
        "session": row.session or "",  # a string on every row: one inferred type
        "policy_step": row.policy_step,  # None for a run state
    }
    if with_weight:
        out["weight"] = 1.0 if weight is None else float(weight)
    return out


class _Order:
    """Which served state comes next: never served ones first, then round robin or weights."""

    def __init__(self, pool: LivePool, weighted: bool, seed: int):
        self.pool, self.weighted = pool, weighted
        self.rng = random.Random(seed)
        self.served: set[str] = set()
        self.fresh: deque[str] = deque()
        self.cursor = 0  # round robin: the next position
        self.last: str | None = None
        self.position: dict[str, int] = {}
        self.cumulative: list[float] = []
        self.update()

    def update(self) -> None:
        """Take in a change of the pool: its new states (they come last), all of it when one
        left (positions shift), every weight when weighted."""
        ids = self.pool.state_ids()
        cut = len(ids)
        while cut and ids[cut - 1] not in self.position:
            cut -= 1
        if cut < len(self.position):  # a state left
            self.position = {sid: i for i, sid in enumerate(ids)}
            if self.last in self.position:  # round robin goes on after the last one served
                self.cursor = self.position[self.last] + 1
        else:
            self.position.update((ids[i], i) for i in range(cut, len(ids)))
        self.fresh.extend(sid for sid in ids[cut:] if sid not in self.served)
        if self.weighted:
            weights = (self.pool.weight(i) for i in range(len(ids)))
            self.cumulative = list(accumulate(1.0 if w is None else max(w, 1e-6) for w in weights))

    def later(self, sid: str) -> None:
        """``sid`` could not be read when drawn: it is drawn again after the fresh states."""
        self.served.discard(sid)
        self.fresh.append(sid)

    def next(self) -> int | None:
        """The next position to serve (``None``: the pool serves nothing now)."""
        if not self.position:
            return None
        while self.fresh:
            sid = self.fresh.popleft()
            if sid in self.position and sid not in self.served:
                return self._served(self.position[sid])
        if self.weighted:
            draw = self.rng.random() * self.cumulative[-1]
            return self._served(min(bisect_right(self.cumulative, draw), len(self.position) - 1))
        i = self.cursor % len(self.position)
        self.cursor = i + 1
        self.last = self.pool.state_id(i)
        return self._served(i)

    def _served(self, i: int) -> int:
        self.served.add(self.pool.state_id(i))
        return i


def live_rows(
    store: str,
    sessions: str | None = None,
    options: dict[str, Any] | None = None,
    feedback: str | None = None,
    refresh_seconds: float = 1.0,
    seed: int = 0,
    split: str | None = None,
    val_fraction: float = 0.0,
    storage_options: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """Rows forever: states never served first (in the pool's order), then round robin or a
    weighted draw."""
    selection = SelectionOptions(**(options or {}))
    pool = LivePool(
        store, sessions=sessions, options=selection, feedback=feedback, split=split,
        val_fraction=val_fraction, seed=seed, refresh_seconds=refresh_seconds,
        storage_options=storage_options,
    )  # fmt: skip
    weighted = selection.weight is not None
    order = _Order(pool, weighted, seed)
    misses = 0
    while True:
        if pool.refresh():
            order.update()
        i = order.next()
        if i is None:
            time.sleep(WAIT_SECONDS)
            continue
        sid = pool.state_id(i)
        try:
            row = pool.export_row(i)
        except (PoolUnavailable, IndexError):  # not readable now: another one now, it later
            order.later(sid)
            misses += 1
            if misses >= len(pool):  # none readable: the store is down, wait for it
                time.sleep(WAIT_SECONDS)
                misses = 0
            continue
        misses = 0
        yield trl_row(row, pool.weight(i), weighted)


def live_trl_dataset(
    store: str | os.PathLike[str] | None = None,
    *,
    sessions: str | os.PathLike[str] | None = None,
    options: SelectionOptions | None = None,
    feedback: str | os.PathLike[str] | None = None,
    refresh_seconds: float = 1.0,
    seed: int = 0,
    split: str | None = None,
    val_fraction: float = 0.0,
    storage_options: dict[str, Any] | None = None,
):
    """An endless ``datasets.IterableDataset`` over the pool in ``store`` (default: the setting).

    ``sessions``: the folder rollout workers seal states into (default: the setting); a
    state sealed there is served without waiting for Dagster. ``feedback``: a feedback
    folder to fold into ``state_stats`` as training goes (the one ``STATEPOOL_FEEDBACK_DIR``
    names, where ``trl_reward`` records), so the selection in ``options`` follows the
    trainer's own rewards. ``split``: ``None`` serves every state, ``"train"`` or ``"val"``
    one split, the runs split as ``statepool export --val-fraction val_fraction --seed seed``.
    """
    from datasets import IterableDataset

    from ..core.config import Settings

    settings = Settings.from_env()
    options = options or SelectionOptions()
    kwargs = {
        "store": str(store) if store is not None else settings.store_dir,
        "sessions": str(sessions) if sessions is not None else settings.sessions_dir,
        "options": {
            "drop_zero_variance": options.drop_zero_variance,
            "difficulty_band": options.difficulty_band,
            "band_on": options.band_on,
            "weight": options.weight,
            "unseen_weight": options.unseen_weight,
        },
        "feedback": None if feedback is None else str(feedback),
        "refresh_seconds": refresh_seconds,
        "seed": seed,
        "split": split,
        "val_fraction": val_fraction,
        "storage_options": storage_options,  # fsspec's, for a store or sessions URL
    }
    return IterableDataset.from_generator(live_rows, gen_kwargs=kwargs)
