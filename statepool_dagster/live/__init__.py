"""The pool as a trainer sees it while it trains, and the trainers' datasets over it.

- :mod:`.pool`: :class:`LivePool`, every state the export would serve plus sealed session
  segments not stored yet, kept as an index updated by change; rows read on demand (no
  trainer library imported).
- :mod:`.trl`: :func:`live_trl_dataset`, a ``datasets.IterableDataset`` for TRL's
  ``GRPOTrainer``.
- :mod:`.verl`: :class:`LiveRLDataset`, verl's ``data.custom_cls`` whose ``on_batch_end``
  (called by the legacy ``RayPPOTrainer`` after each step) takes in new states.
"""

from .pool import LivePool
from .unavailable import PoolUnavailable

__all__ = ["LivePool", "PoolUnavailable"]
