"""What the instance remembers: the source fingerprint of each run's last materialization.

Each materialization of the last asset records the fingerprint of the run files it
was built from (metadata ``source_fingerprint``, per partition, so single-run
backfills over many runs record each run's own). One indexed query finds the
latest materialization of every partition; only records not seen before are read.
"""

from __future__ import annotations

from dagster import AssetKey, AssetRecordsFilter, DagsterEventType, DagsterInstance

from ...core import names

FINAL_ASSET = AssetKey(names.FINAL_ASSET)
_BATCH = 500

# Records already read, per event log and partition: (storage id, fingerprint). Storage
# ids only grow, so an entry is valid exactly while its id is the partition's latest.
_seen_by_storage: dict[str, dict[str, tuple[int, str | None]]] = {}


def _storage_key(instance: DagsterInstance) -> str:
    storage = instance.event_log_storage
    return f"{type(storage).__name__}:{instance.root_directory}:{storage.inst_data!r}"


def recorded_fingerprints(instance: DagsterInstance) -> dict[str, str]:
    """``{run: fingerprint}`` for every run whose prompts were materialized."""
    _seen = _seen_by_storage.setdefault(_storage_key(instance), {})
    latest = instance.get_latest_storage_id_by_partition(
        FINAL_ASSET, DagsterEventType.ASSET_MATERIALIZATION
    )
    stale = [sid for run, sid in latest.items() if _seen.get(run, (None,))[0] != sid]
    for i in range(0, len(stale), _BATCH):
        chunk = stale[i : i + _BATCH]
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=FINAL_ASSET, storage_ids=chunk), limit=len(chunk)
        ).records
        for record in records:
            meta = record.asset_materialization.metadata
            value = meta.get(names.FINGERPRINT)
            _seen[record.partition_key] = (record.storage_id, value.value if value else None)
    found = {}
    for run, sid in latest.items():
        cached = _seen.get(run)
        if cached and cached[0] == sid and cached[1]:
            found[run] = cached[1]
    return found
