"""What the instance remembers: the source fingerprint of each run's last materialization.

Every asset's data version is the fingerprint of the run files it was built from,
so the latest data version of the last asset per partition answers "is this run
up to date?" in one indexed query.
"""

from __future__ import annotations

from dagster import AssetKey, DagsterEventType, DagsterInstance
from dagster._core.definitions.data_version import DATA_VERSION_TAG

# The last asset of the chain: a run is done once its prompts are materialized.
FINAL_ASSET = AssetKey("curator_prompts")


def recorded_fingerprints(instance: DagsterInstance) -> dict[str, str]:
    """``{run: fingerprint}`` for every run whose prompts were materialized."""
    tags = instance.event_log_storage.get_latest_tags_by_partition(
        FINAL_ASSET, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG]
    )
    return {run: t[DATA_VERSION_TAG] for run, t in tags.items() if DATA_VERSION_TAG in t}
