"""A ``datasets.IterableDataset`` over the live pool for TRL's ``GRPOTrainer``.

Rows have the columns of ``statepool export --format trl`` (and ``weight`` when a
weight is asked for). The stream never ends (set ``max_steps``) and re-reads the pool as
it goes: a state materialized after training started is served next, before any state
is served again; a state the selection leaves out is no longer served. Use it with
``GRPOConfig(shuffle_dataset=False)``: TRL's shuffle buffer would hold new states back.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from typing import Any

from ..core.export.rows import ExportRow
from ..core.feedback.select import SelectionOptions
from .pool import LivePool

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
    }
    if with_weight:
        out["weight"] = 1.0 if weight is None else float(weight)
    return out


def live_rows(
    store: str,
    options: dict[str, Any] | None = None,
    feedback: str | None = None,
    refresh_seconds: float = 1.0,
    seed: int = 0,
) -> Iterator[dict[str, Any]]:
    """Rows forever: states never served first (oldest first), then a weighted draw."""
    selection = SelectionOptions(**(options or {}))
    pool = LivePool(store, selection, feedback, refresh_seconds)
    rng = random.Random(seed)
    served: dict[str, int] = {}
    while True:
        pool.refresh()
        if not pool.rows:
            time.sleep(WAIT_SECONDS)
            continue
        fresh = [i for i, r in enumerate(pool.rows) if r.state_id not in served]
        if fresh:
            i = fresh[0]
        else:
            weights = [1.0 if w is None else max(w, 1e-6) for w in pool.weights]
            least = min(served[r.state_id] for r in pool.rows)
            if selection.weight is None:  # round robin: the least served next
                i = next(k for k, r in enumerate(pool.rows) if served[r.state_id] == least)
            else:
                i = rng.choices(range(len(pool.rows)), weights=weights)[0]
        row = pool.rows[i]
        served[row.state_id] = served.get(row.state_id, 0) + 1
        yield trl_row(row, pool.weights[i], selection.weight is not None)


def live_trl_dataset(
    store: str | os.PathLike[str] | None = None,
    *,
    options: SelectionOptions | None = None,
    feedback: str | os.PathLike[str] | None = None,
    refresh_seconds: float = 1.0,
    seed: int = 0,
):
    """An endless ``datasets.IterableDataset`` over the pool in ``store`` (default: the setting).

    ``feedback``: a feedback folder to fold into ``state_stats`` as training goes (the one
    ``STATEPOOL_FEEDBACK_DIR`` names, where ``trl_reward`` records), so the selection in
    ``options`` follows the trainer's own rewards.
    """
    from datasets import IterableDataset

    from ..core.config import Settings

    store = str(store) if store is not None else Settings.from_env().store_dir
    options = options or SelectionOptions()
    kwargs = {
        "store": store,
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
    }
    return IterableDataset.from_generator(live_rows, gen_kwargs=kwargs)
