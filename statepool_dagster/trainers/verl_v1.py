"""verl's v1 trainer: ``trainer.v1.sampler.custom_sampler``, its replay buffer, refreshing the pool.

The v1 trainer (``trainer.use_v1=True``) builds its prompts' dataset through the same
``data.custom_cls`` but never calls ``on_batch_end``. Its replay buffer's ``sample`` runs
once per step in the trainer's process: these subclasses of verl's buffers reload every
:class:`~statepool_dagster.trainers.verl.LiveRLDataset` there first (only what changed is read),
then sample as verl does.

- ``trainer.v1.sampler.custom_sampler.path=pkg://statepool_dagster.trainers.verl_v1``
- ``name=LiveReplayBuffer`` (``trainer.v1.trainer_mode=sync``) or ``LiveReplayBufferAsync``.

verl passes a custom sampler no DAPO ``filter_groups`` settings: the pool's own
``drop_zero_variance`` stands in for it. Needs TransferQueue (in the ``trainer`` extra).
"""

from __future__ import annotations

from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from .verl import refresh_live_datasets


class LiveReplayBuffer(ReplayBuffer):
    """verl's synchronous replay buffer; the live datasets are refreshed before each sample."""

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        if partition_id == "train":
            refresh_live_datasets()
        return super().sample(global_steps, partition_id, batch_size)


class LiveReplayBufferAsync(ReplayBufferAsync):
    """verl's asynchronous replay buffer; the live datasets are refreshed before each sample."""

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        if partition_id == "train":
            refresh_live_datasets()
        return super().sample(global_steps, partition_id, batch_size)
