"""The event-log storages ``dagster.yaml`` names: Dagster's own, connecting and committing less.

``sqlite.py`` (the repository's ``dagster.yaml``) and ``postgres.py``
(``deploy/postgres/dagster.yaml``) change how Dagster's storages connect and commit, not what
they write; ``batch.py`` is what the two share: a batch of events stored in one transaction,
each asset's latest-state row written once. Loaded by the instance, not by the definitions.
Why and what it saves: docs/performance.md, "Dagster's bookkeeping".
"""

import os

# Events Dagster writes in one batch (a multi-partition output's materializations, a run's
# planned events) once this is above 0; read by Dagster at each event, so setting it when the
# instance makes a storage covers every process that writes to the instance.
EVENT_BATCH_SIZE = "10000"


def enable_event_batches() -> None:
    """Let Dagster hand batches to ``store_event_batch`` (unless ``DAGSTER_EVENT_BATCH_SIZE``
    is already set)."""
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", EVENT_BATCH_SIZE)
