"""Every name the core and the Dagster skin share: assets, store folders, files, metadata keys.

Spelled once, here; everything else imports them. With them, the rules names obey: a state
id built and parsed (``<run>_ckpt<k>``), and which names may become partition keys and paths.
"""

from __future__ import annotations

import re
from enum import Enum

# The four run-partitioned assets, in the data's order, and the pool-wide one.
EPISODES = "run_episodes"
SNAPSHOTS = "skill_snapshots"
STATES = "checkpoint_states"
PROMPTS = "curator_prompts"
RUN_ASSETS = (EPISODES, SNAPSHOTS, STATES, PROMPTS)  # each built from the ones before it
FINAL_ASSET = PROMPTS  # a run is done once its prompts are materialized
TRAINING_DATASET = "training_dataset"
STATE_STATS = "state_stats"  # the feedback fold's asset

# The Dagster skin's job, group and resource keys (SETTINGS is also the parameter name
# assets and sensors take the settings resource by).
JOB = "statepool_job"
SESSIONS_JOB = "statepool_sessions_job"
STATE_STATS_JOB = "state_stats_job"
RUNS = "runs"  # the runs' dynamic partitions (one per run folder)
GROUP = "statepool"
SETTINGS = "statepool"
STORE = "statepool_store"

# A run folder's files.
EPISODES_FILE = "episodes.jsonl"
SNAPSHOTS_DIR = "snapshots"

# The store's folders besides the run tables (``<asset>/<run>/``).
STATE_POOL = "state_pool"
REJECTS_DIR = "rejects"
EXPORTS = "exports"
REPORT = "report"
POOL_VERSIONS = "pool_versions"  # the live pool's served orders that trainer checkpoints name
LOCKS = ".locks"
DIR_MANIFEST = ".statepool_files"  # hidden: listing readers (and the original script) skip it
TABLE_INDEX = ".index.json"  # hidden: a run table's parts, their keys and the table's marks

# Metadata keys of the run assets' materializations (``StageReport.values`` uses the
# report keys: the stages write them, the skin and sync read them).
ROW_COUNT = "dagster/row_count"
COLUMN_SCHEMA = "dagster/column_schema"
FINGERPRINT = "source_fingerprint"
NOTES = "notes"
STATE_COUNT = "states"
REJECTS = "rejects"
SIDECAR_REJECTS = "sidecar_rejects"
# Where each asset's report counts the run's rejects.
REJECT_COUNTS = (
    (EPISODES, REJECTS),
    (SNAPSHOTS, REJECTS),
    (STATES, SIDECAR_REJECTS),
    (PROMPTS, REJECTS),
)
IGNORED_FILES = "ignored_files"
IGNORED_SIDECARS = "ignored_sidecars"
# Where each asset's report lists the files of a run it did not read, with the reason.
IGNORED_METADATA = ((SNAPSHOTS, IGNORED_FILES), (STATES, IGNORED_SIDECARS))
# The run's totals, also on its final asset's materialization when the same step built
# what they count: `statepool status` then reads that one asset's records.
RUN_STATES = "run_states"  # the states asset's STATE_COUNT
RUN_IGNORED_FILES = "run_ignored_files"  # the files every IGNORED_METADATA lists


# The export formats `statepool export --format` and `training_dataset` write.
EXPORT_FORMATS = ("verl", "trl", "pool")


class Change(str, Enum):
    """What a run folder's files did since its last materialization (sync and the sensor)."""

    NEW = "new"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    SETTLING = "settling"  # its newest file is younger than the settle time: not yet


class RejectSource(str, Enum):
    """What a reject was set aside by: its ``source`` in ``rejects/<run>.jsonl`` and
    ``session_rejects/``."""

    EPISODES = "episodes"
    SNAPSHOTS = "snapshots"
    SIDECARS = "sidecars"
    PROMPTS = "prompts"
    SESSION_STATES = "session_states"
    INGEST = "ingest"


# The sources of a run's rejects file, in the data's order (the report lists them so).
RUN_REJECT_SOURCES = (
    RejectSource.EPISODES,
    RejectSource.SNAPSHOTS,
    RejectSource.SIDECARS,
    RejectSource.PROMPTS,
)


class RunStatus(str, Enum):
    """Where a run stands against its last materialization (``statepool status``)."""

    MATERIALIZED = "materialized"
    STALE = "stale"
    NEVER = "never"
    FAILED = "failed"


# Sessions (the pool's second source): the dynamic partitions, their assets and folders.
SESSIONS_PARTITIONS = "sessions"
SESSION_STATES = "session_states"
SESSION_PROMPTS = "session_prompts"
SESSION_REJECTS = "session_rejects"

# The scales feedback is measured on: a graded answer's score (the grader's: an answer
# with no ops list scores the bottom, one that gets everything right the top) and the
# ops-match rate (the share of answers whose ops equal the reference's). Selection
# bands, weights and the report's axes derive from them.
SCORE_RANGE = (-1.0, 1.0)
MATCH_RANGE = (0.0, 1.0)
LAST_STDS = 16  # the most recent group spreads ``state_stats`` keeps per state

# A run state's id: ``<run>_ckpt<k>``, the state of checkpoint ``k`` of run ``<run>``.
_STATE_ID = re.compile(r"(?P<run>.+)_ckpt(?P<k>[0-9]+)")


def run_state_id(run: str, version: int) -> str:
    """The id of run ``run``'s state at checkpoint ``version``."""
    return f"{run}_ckpt{version}"


def parse_run_state_id(state_id: str) -> tuple[str, int] | None:
    """``(run, checkpoint)`` of a run state's id; ``None`` for any other id."""
    match = _STATE_ID.fullmatch(state_id)
    return None if match is None else (match["run"], int(match["k"]))


# Names that become partition keys, file and folder names: runs, sessions, segment writers.
_KEY_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")
MAX_RUN_NAME = 200


def key_name_problem(name: str, max_length: int) -> str | None:
    """Why ``name`` cannot be a key (a partition, a folder, a file's prefix), or ``None``."""
    if not name:
        return "empty name"
    if len(name) > max_length:
        return f"longer than {max_length} characters"
    if name.startswith("."):
        return "starts with a dot"
    if not _KEY_CHARACTERS.fullmatch(name):
        bad = sorted({c for c in name if not _KEY_CHARACTERS.fullmatch(c)})
        return "characters outside [A-Za-z0-9._-]: " + ", ".join(repr(c) for c in bad[:5])
    return None


def checked_key_name(name: str, kind: str, max_length: int = MAX_RUN_NAME) -> str:
    """``name`` when it can be a ``kind`` key (a run, a session, a writer); ``ValueError``
    naming the rule otherwise."""
    problem = key_name_problem(name, max_length)
    if problem:
        raise ValueError(f"invalid {kind} name {name!r}: {problem}")
    return name


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run partition key, or ``None`` when it can."""
    return key_name_problem(name, MAX_RUN_NAME)


def check_run_name(name: str) -> str:
    """Return ``name`` if it is a safe run key; raise ``ValueError`` naming the rule otherwise."""
    return checked_key_name(name, "run")
