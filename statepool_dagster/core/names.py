"""Every name the core and the Dagster skin share: assets, store folders, files, metadata keys.

Spelled once, here; everything else imports them.
"""

from __future__ import annotations

from enum import Enum

# The four run-partitioned assets, in the data's order, and the pool-wide one.
EPISODES = "run_episodes"
SNAPSHOTS = "skill_snapshots"
STATES = "checkpoint_states"
PROMPTS = "curator_prompts"
RUN_ASSETS = (EPISODES, SNAPSHOTS, STATES, PROMPTS)
TRAINING_DATASET = "training_dataset"

# A run folder's files.
EPISODES_FILE = "episodes.jsonl"
SNAPSHOTS_DIR = "snapshots"

# The store's folders besides the run tables (``<asset>/<run>/``).
STATE_POOL = "state_pool"
REJECTS = "rejects"
EXPORTS = "exports"
REPORT = "report"
LOCKS = ".locks"
DIR_MANIFEST = ".statepool_files"  # hidden: listing readers (and the original script) skip it
TABLE_INDEX = ".index.json"  # hidden: a run table's parts, their keys and the table's marks

# Metadata keys recorded per partition.
FINGERPRINT_KEY = "source_fingerprint"


class RunStatus(str, Enum):
    """Where a run stands against its last materialization (``statepool status``)."""

    MATERIALIZED = "materialized"
    STALE = "stale"
    NEVER = "never"
    FAILED = "failed"
