"""Reads the event logs answer once per batch of writes (``storage.py``, ``pg_storage.py``).

While a step records its partitions (inside ``batched_writes``), Dagster checks every
``context.add_asset_metadata(..., partition_key=...)`` against the run's partition range:
two ``has_dynamic_partition`` queries and a ``get_dynamic_partitions`` of every key, for each
asset of each partition, a few thousand queries a sync. Inside a batch they are answered
from one read of the partitions' keys, as a transaction with a snapshot of the table would
answer them; outside a batch every call reads the table, as Dagster's own storage does.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence


class PartitionsReadOncePerBatch:
    """Mixed into an event log whose ``batched_writes`` sets ``_local.session``."""

    _local: threading.local

    def _batch_partitions(self, partitions_def_name: str) -> tuple[list[str], set[str]] | None:
        if getattr(self._local, "session", None) is None:
            return None
        cache: dict[str, tuple[list[str], set[str]]] | None = getattr(
            self._local, "partitions", None
        )
        if cache is None:
            cache = self._local.partitions = {}
        if partitions_def_name not in cache:
            keys = list(super().get_dynamic_partitions(partitions_def_name))
            cache[partitions_def_name] = (keys, set(keys))
        return cache[partitions_def_name]

    def _end_batch_reads(self) -> None:
        self._local.partitions = None

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        cached = self._batch_partitions(partitions_def_name)
        if cached is None:
            return super().get_dynamic_partitions(partitions_def_name)
        return list(cached[0])

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        cached = self._batch_partitions(partitions_def_name)
        if cached is None:
            return super().has_dynamic_partition(partitions_def_name, partition_key)
        return partition_key in cached[1]
