"""The pool as a trainer sees it while it trains: an index updated by change, rows on demand.

What the trainer adapters (:mod:`statepool_dagster.trainers`) and the command line use:

- :class:`LivePool`: every state the export would serve plus sealed session segments not
  stored yet, kept as an index updated by change; rows read on demand (no trainer library
  imported).
- :class:`PoolUnavailable`: a served row that cannot be read now (the store unreachable or
  too slow to answer).
- :class:`VersionGone`: a pool version a checkpoint names that retention has removed.
- :class:`StateSource`: where a served state came from (a run's checkpoint, a session).
"""

from .entries import StateSource
from .pool import LivePool
from .unavailable import PoolUnavailable
from .versions import VersionGone

__all__ = ["LivePool", "PoolUnavailable", "StateSource", "VersionGone"]
