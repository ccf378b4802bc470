"""Each asset's columns: their names, what they hold, their Arrow types.

Nested data travels as one JSON text column (exactly what the state files hold),
so every row of a table has the same Arrow schema and nothing is lost. A column
not typed here is ``large_string``.
"""

from __future__ import annotations

import pyarrow as pa

from ..names import EPISODES, PROMPTS, SNAPSHOTS, STATES

EPISODE_COLUMNS = {
    "line": "1-based line in episodes.jsonl",
    "version": "skill_lib_version the episode ran under",
    "id": "episode id",
    "task": "OVO-Bench task code",
    "video": "video path",
    "realtime": "seconds into the stream",
    "question": "question text",
    "gt": "ground-truth answer",
    "response": "the agent's answer",
    "correct": "response matched gt",
    "record": "the full episode as JSON, lossless (as the state files write it)",
}
EPISODE_TYPES = {
    "line": pa.int64(),
    "version": pa.int64(),
    "realtime": pa.float64(),
    "correct": pa.bool_(),
}

SNAPSHOT_COLUMNS = {
    "version": "version from the file name skills_v<k>.json",
    "file": "snapshot file, relative to the runs folder",
    "declared_version": "the version field inside the file",
    "n_cards": "cards in the library",
    "library": "the library as JSON, embeddings removed (as the state files write it)",
    "file_stamp": "size:mtime_ns of the file it was read from (unchanged files are reused)",
}
SNAPSHOT_TYPES = {"version": pa.int64(), "declared_version": pa.int64(), "n_cards": pa.int64()}

STATE_COLUMNS = {
    "state_id": "<run>_ckpt<k>",
    "run": "run folder name",
    "version": "checkpoint k",
    "library_version": "version of the state's library (k; k-1 with pairing pre_curation)",
    "batch_version": "skill_lib_version of the paired episode batch",
    "n_cards": "cards in the library snapshot",
    "n_episodes": "episodes in the batch",
    "state": "the CheckpointState as JSON, exactly as in state_pool/",
    "reference_ops": "JSON: the ops from this library to the run's next one (next_version, ops)",
    "input_key": "digest of everything the state was built from (unchanged inputs are reused)",
}
STATE_TYPES = {
    name: pa.int64()
    for name in ("version", "library_version", "batch_version", "n_cards", "n_episodes")
}

PROMPT_COLUMNS = {
    "state_id": "<run>_ckpt<k>",
    "run": "run folder name",
    "version": "checkpoint k",
    "prompt": "the curator prompt, rendered as the inference side renders it",
    "prompt_chars": "length of the prompt in characters",
    "reference_ops": "JSON: the ops from this state's library to the run's next one",
    "input_key": "digest of the state and the prompt spec (unchanged inputs are reused)",
    "state_key": "input_key of the state it was rendered from (exports pair on it)",
}
PROMPT_TYPES = {"version": pa.int64(), "prompt_chars": pa.int64()}


def _schema(columns: dict[str, str], types: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([(name, types.get(name, pa.large_string())) for name in columns])


COLUMNS = {
    EPISODES: EPISODE_COLUMNS,
    SNAPSHOTS: SNAPSHOT_COLUMNS,
    STATES: STATE_COLUMNS,
    PROMPTS: PROMPT_COLUMNS,
}
SCHEMAS = {
    EPISODES: _schema(EPISODE_COLUMNS, EPISODE_TYPES),
    SNAPSHOTS: _schema(SNAPSHOT_COLUMNS, SNAPSHOT_TYPES),
    STATES: _schema(STATE_COLUMNS, STATE_TYPES),
    PROMPTS: _schema(PROMPT_COLUMNS, PROMPT_TYPES),
}
