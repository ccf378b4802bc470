"""Datasets that follow the pool while a trainer runs (the ``trainer`` extra).

- :mod:`.pool`: :class:`LivePool`, the store's states with the selection applied,
  re-read when the store or the feedback statistics change (no trainer imported).
- :mod:`.trl`: :func:`live_trl_dataset`, a ``datasets.IterableDataset`` for TRL's
  ``GRPOTrainer``.
- :mod:`.verl`: :class:`LiveRLDataset`, verl's ``data.custom_cls`` whose ``on_batch_end``
  (called by the legacy ``RayPPOTrainer`` after each step) reloads states and stats.
"""
