"""The trainers' datasets over the live pool, and what their checkpoints keep of it.

- :mod:`.trl`: :func:`~.trl.live_trl_dataset`, a ``datasets.IterableDataset`` for TRL's
  ``GRPOTrainer``, and :class:`~.trl.LivePoolCheckpoint`, the callback that saves its cursor.
- :mod:`.verl`: :class:`~.verl.LiveRLDataset`, verl's ``data.custom_cls``
  (``pkg://statepool_dagster.trainers.verl``) whose ``on_batch_end`` (called by the legacy
  ``RayPPOTrainer`` after each step) takes in new states; :mod:`.verl_v1`, the v1 trainer's
  replay buffer that refreshes it.
- :mod:`.cursor`: the order a stream draws the pool's states in, and the cursor a resumed
  trainer draws on from; :mod:`.lineage`: what a checkpoint trained on.

Each module imports its trainer library itself: importing this package imports none.
"""
