"""verl's ``data.custom_cls``: the pool as an RL dataset, reloaded after each training step.

``data.custom_cls.path=pkg://statepool_dagster.live.verl``, ``name=LiveRLDataset``. The
rows are those of ``statepool export --format verl``, built from the store in
``data.statepool.store`` (else ``STATEPOOL_STORE_DIR``; ``data.train_files`` is not
read but verl requires it), with the selection of ``data.statepool.select`` (keys of
:class:`SelectionOptions`, else the ``STATEPOOL_SELECT_*`` variables). The legacy
``RayPPOTrainer`` calls :meth:`LiveRLDataset.on_batch_end` after each step: new states
come in, states the selection leaves out go. New states are served first, whatever
index the sampler asks for; the sampler learns the new length at its next epoch, and an
index past the end wraps around. Changes reach the dataloader only with
``data.dataloader_num_workers=0`` (workers hold a copy until the next epoch).

The v1 trainer never calls ``on_batch_end``: its replay buffer is the hook there
(:mod:`.verl_v1`), reloading every live dataset of the process before each sample.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import datasets
from verl.utils.dataset.rl_dataset import RLHFDataset

from ..core.config import Settings
from ..core.export.write import verl_table
from ..core.feedback.importers import feedback_folder
from ..core.feedback.select import SelectionOptions
from .pool import LivePool

log = logging.getLogger(__name__)
_live: weakref.WeakSet[LiveRLDataset] = weakref.WeakSet()


def refresh_live_datasets() -> int:
    """Reload every live dataset of this process (the v1 replay buffer calls it); how many."""
    datasets_ = list(_live)
    for dataset in datasets_:
        dataset.on_batch_end()
    return len(datasets_)


def _options(config: Any) -> SelectionOptions:
    select = (config.get("statepool") or {}).get("select") if config is not None else None
    if not select:
        return SelectionOptions.from_env()
    band = select.get("difficulty_band")
    return SelectionOptions(
        drop_zero_variance=select.get("drop_zero_variance"),
        difficulty_band=tuple(band) if band else None,
        band_on=select.get("band_on") or "match",
        weight=select.get("weight"),
    )


class LiveRLDataset(RLHFDataset):
    """``RLHFDataset`` whose rows come from the live pool (see the module's doc)."""

    def _read_files_and_tokenize(self) -> None:
        own = self.config.get("statepool") or {}
        settings = Settings.from_env(store_dir=own.get("store"))
        store = settings.store_dir
        feedback = own.get("feedback") or feedback_folder(settings)
        self.pool = LivePool(store, _options(self.config), feedback, refresh_seconds=0.0)
        self.pool.refresh(force=True)
        self.state_ids: list[str] = []
        self._fresh: list[int] = []
        self._load_rows()
        _live.add(self)

    def _load_rows(self) -> None:
        frame = datasets.Dataset(verl_table(self.pool.rows))
        self.dataframe = self.maybe_filter_out_long_prompts(frame)
        known = set(self.state_ids)
        self.state_ids = [info["state_id"] for info in self.dataframe["extra_info"]]
        if known:  # states new since the last load are served first
            self._fresh = [i for i, sid in enumerate(self.state_ids) if sid not in known]

    def on_batch_end(self, batch: Any = None) -> None:
        """Reload states and stats (verl's legacy trainer calls it after each step)."""
        if self.pool.refresh():
            before = len(self.dataframe)
            self._load_rows()
            log.info("statepool: %d -> %d states after a step", before, len(self.dataframe))

    def __getitem__(self, item: int) -> dict:
        if self._fresh:
            return super().__getitem__(self._fresh.pop(0))
        return super().__getitem__(item % len(self.dataframe))
