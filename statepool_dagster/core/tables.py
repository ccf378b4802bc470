"""Each asset's table, built from and read back into the core's types.

Nested data travels as one JSON text column (exactly what the state files hold),
so every row of a table has the same Arrow schema and nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgspec
import pandas as pd

from .episodes import EpisodeLine
from .join import JoinedState, group_batches
from .reference_ops import ops_json
from .snapshots import Snapshot

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


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
    "record": "the full episode as JSON, lossless",
}


def episodes_table(episodes: Iterable[EpisodeLine]) -> pd.DataFrame:
    rows = []
    for e in episodes:
        r = e.record
        rows.append(
            (
                e.line,
                e.version,
                _text(r.get("id")),
                _text(r.get("task")),
                _text(r.get("video")),
                _number(r.get("realtime")),
                _text(r.get("question")),
                _text(r.get("gt")),
                _text(r.get("response")),
                _flag(r.get("correct")),
                _encode(r).decode("utf-8"),
            )
        )
    frame = pd.DataFrame.from_records(rows, columns=list(EPISODE_COLUMNS))
    return frame.astype({"line": "int64", "version": "int64", "correct": "boolean"})


def episodes_from_table(frame: pd.DataFrame) -> list[EpisodeLine]:
    return [
        EpisodeLine(int(line), int(version), _decode(record))
        for line, version, record in zip(
            frame["line"], frame["version"], frame["record"], strict=True
        )
    ]


def batches_from_table(frame: pd.DataFrame) -> dict[int, list[dict[str, Any]]]:
    return group_batches(episodes_from_table(frame))


SNAPSHOT_COLUMNS = {
    "version": "version from the file name skills_v<k>.json",
    "file": "snapshot file, relative to the runs folder",
    "declared_version": "the version field inside the file",
    "n_cards": "cards in the library",
    "library": "the library as JSON, embeddings removed",
    "file_stamp": "size:mtime_ns of the file it was read from (unchanged files are reused)",
}

SnapshotRow = tuple[int, str, int | None, int, str, str]


def snapshot_row(snapshot: Snapshot, stamp: str = "") -> SnapshotRow:
    declared = snapshot.declared_version
    return (
        snapshot.version,
        snapshot.file,
        declared if isinstance(declared, int) and not isinstance(declared, bool) else None,
        len(snapshot.library.get("cards", [])),
        _encode(snapshot.library).decode("utf-8"),
        stamp,
    )


def snapshots_frame(rows: Iterable[SnapshotRow]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(list(rows), columns=list(SNAPSHOT_COLUMNS))
    return frame.astype({"version": "int64", "declared_version": "Int64", "n_cards": "int64"})


def snapshots_from_table(frame: pd.DataFrame) -> list[Snapshot]:
    return [
        Snapshot(int(v), f, _decode(lib))
        for v, f, lib in zip(frame["version"], frame["file"], frame["library"], strict=True)
    ]


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

StateRow = tuple[str, str, int, int, int, int, int, str, str | None, str]


def state_row(j: JoinedState, input_key: str) -> StateRow:
    """One ``checkpoint_states`` row for a joined state (its JSON exactly as the seed writes)."""
    return (
        j.state.state_id,
        j.run,
        j.version,
        j.version if j.library_version is None else j.library_version,
        j.batch_version,
        len(j.state.lib_snapshot.get("cards", [])),
        len(j.state.episodes),
        j.state.to_json(),
        None if j.reference_ops is None else ops_json(j.reference_ops),
        input_key,
    )


def states_frame(rows: Iterable[StateRow]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(list(rows), columns=list(STATE_COLUMNS))
    return frame.astype(
        {
            "version": "int64",
            "library_version": "int64",
            "batch_version": "int64",
            "n_cards": "int64",
            "n_episodes": "int64",
        }
    )


PROMPT_COLUMNS = {
    "state_id": "<run>_ckpt<k>",
    "run": "run folder name",
    "version": "checkpoint k",
    "prompt": "the curator prompt, rendered as the inference side renders it",
    "prompt_chars": "length of the prompt in characters",
    "reference_ops": "JSON: the ops from this state's library to the run's next one",
    "input_key": "digest of the state and the prompt spec (unchanged inputs are reused)",
}


def prompts_table(rows: Iterable[tuple[str, str, int, str, str | None, str]]) -> pd.DataFrame:
    """Rows of ``(state_id, run, version, prompt, reference_ops_json, input_key)``."""
    records = [
        (sid, run, version, prompt, len(prompt), ops, key)
        for sid, run, version, prompt, ops, key in rows
    ]
    frame = pd.DataFrame.from_records(records, columns=list(PROMPT_COLUMNS))
    return frame.astype({"version": "int64", "prompt_chars": "int64"})


def rejects_jsonl(rejects: Iterable[Any], source: str) -> list[str]:
    return [json.dumps({**r.model_dump(), "source": source}, ensure_ascii=False) for r in rejects]
