"""The feedback fold in the store: load it, fold new segments, save it, read the table.

``<store>/feedback_stats/`` holds ``fold.json`` (generation, segments folded, counts)
and, named by generation, the state and open-group accumulators as Parquet; the
manifest is written last, so a fold interrupted midway is simply done again. The
per-state table readers use is ``state_stats.parquet`` beside them; each state's history by
step (:mod:`.history`) is ``history-<generation>.parquet``, read with :func:`read_history`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from ..locations import AnyPath, is_local, read_fresh
from ..segments import list_segments
from ..store.atomic import read_parquet, write_bytes_atomic, write_parquet_atomic
from .folders import MANIFEST, stats_folder
from .history import Histories, history_table
from .stats import DEFAULT_CLOSE_SECONDS, Fold, GroupTally, StateTally

STATS_TABLE = "state_stats.parquet"
_STATE_ACC = pa.schema(
    [
        ("state_id", pa.string()),
        ("answers", pa.int64()),
        ("score_mean", pa.float64()),
        ("score_m2", pa.float64()),
        ("match_n", pa.int64()),
        ("match_known", pa.int64()),
        ("groups", pa.int64()),
        ("spread_groups", pa.int64()),
        ("zero_groups", pa.int64()),
        ("last_step", pa.int64()),
        ("last_time", pa.float64()),
        ("last_stds", pa.list_(pa.float64())),
    ]
)
_GROUP_ACC = pa.schema(
    [
        ("group", pa.string()),
        ("state_id", pa.string()),
        ("n", pa.int64()),
        ("mean", pa.float64()),
        ("m2", pa.float64()),
        ("first_time", pa.float64()),
        ("last_time", pa.float64()),
    ]
)
# A tally's fields are named as its saved columns: loaded and saved by name, in any order.
_STATE_FIELDS = [f.name for f in fields(StateTally)]
_GROUP_FIELDS = [f.name for f in fields(GroupTally)]


@contextlib.contextmanager
def _locked(folder: AnyPath) -> Iterator[None]:
    """One fold at a time on this machine (a sensor's run and a command line's)."""
    if not is_local(folder):
        yield
        return
    from ..store.layout import file_lock

    with file_lock(folder / ".lock"):
        yield


def load_fold(store: str | os.PathLike[str]) -> tuple[Fold, dict[str, Any]]:
    """The saved fold (empty when none) and its manifest."""
    folder = stats_folder(store)
    try:
        manifest = json.loads(read_fresh(folder / MANIFEST))
    except FileNotFoundError:
        return Fold(), {}
    gen = manifest["generation"]
    fold = Fold(
        folded=set(manifest["folded"]),
        records=manifest["records"],
        bad=manifest["bad"],
        bad_examples=list(manifest["bad_examples"]),
        generation=gen,
    )
    states = read_parquet(folder / f"states-{gen}.parquet").to_pydict()
    cols = [states[c] for c in _STATE_FIELDS]
    for sid, *acc in zip(states["state_id"], *cols, strict=True):
        fold.states[sid] = StateTally(*acc)
    groups = read_parquet(folder / f"groups-{gen}.parquet").to_pydict()
    cols = [groups[c] for c in _GROUP_FIELDS]
    for gid, sid, *acc in zip(groups["group"], groups["state_id"], *cols, strict=True):
        fold.groups[gid] = GroupTally(*acc)
        fold.group_state[gid] = sid
    with contextlib.suppress(FileNotFoundError):  # a fold saved before histories were kept
        fold.history = Histories(read_parquet(folder / f"history-{gen}.parquet"))
    return fold, manifest


def _save(folder: AnyPath, fold: Fold, feedback: str) -> pa.Table:
    gen = fold.generation + 1
    tallies: list[Any] = list(fold.states.values())
    columns = [list(fold.states), *([getattr(t, c) for t in tallies] for c in _STATE_ACC.names[1:])]
    write_parquet_atomic(folder / f"states-{gen}.parquet", pa.table(columns, _STATE_ACC))
    tallies = list(fold.groups.values())
    columns = [
        list(fold.groups),
        [fold.group_state[gid] for gid in fold.groups],
        *([getattr(t, c) for t in tallies] for c in _GROUP_ACC.names[2:]),
    ]
    write_parquet_atomic(folder / f"groups-{gen}.parquet", pa.table(columns, _GROUP_ACC))
    write_parquet_atomic(folder / f"history-{gen}.parquet", fold.history.table())
    stats = fold.table()
    write_parquet_atomic(folder / STATS_TABLE, stats)
    manifest = {
        "generation": gen,
        "feedback": feedback,
        "folded": sorted(fold.folded),
        "records": fold.records,
        "bad": fold.bad,
        "bad_examples": fold.bad_examples,
        "open_groups": len(fold.groups),
        "states": stats.num_rows,
        "saved": time.time(),
    }
    write_bytes_atomic(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
    gone = ("states", "groups", "history")
    for old in (f"{kind}-{fold.generation}.parquet" for kind in gone):
        with contextlib.suppress(FileNotFoundError):
            (folder / old).unlink()
    fold.generation = gen
    return stats


@dataclass
class FoldReport:
    """What one fold did, and the table it left."""

    new_segments: int
    new_records: int
    bad: int
    closed_groups: int
    table: pa.Table


def update_stats(
    store: str | os.PathLike[str],
    feedback: str | os.PathLike[str],
    *,
    close_seconds: float = DEFAULT_CLOSE_SECONDS,
    now: float | None = None,
) -> FoldReport:
    """Fold the sealed segments of ``feedback`` not folded yet; save and return the table."""
    folder = stats_folder(store)
    with _locked(folder):
        fold, _ = load_fold(store)
        records, bad = fold.records, fold.bad
        new = [s for s in list_segments(feedback) if s.name not in fold.folded]
        for segment in new:
            fold.fold_segment(segment.path, segment.name)
        closed = fold.close_groups((time.time() if now is None else now) - close_seconds)
        if new or closed or fold.generation == 0:
            table = _save(folder, fold, str(feedback))
        else:
            table = read_stats(store)
        return FoldReport(len(new), fold.records - records, fold.bad - bad, closed, table)


def read_history(store: str | os.PathLike[str]) -> pa.Table:
    """Each state's history by step (:mod:`.history`) as of the last fold (empty before any)."""
    from .history import HISTORY_SCHEMA

    folder = stats_folder(store)
    try:
        gen = json.loads(read_fresh(folder / MANIFEST))["generation"]
        return history_table(read_parquet(folder / f"history-{gen}.parquet"))
    except FileNotFoundError:
        return HISTORY_SCHEMA.empty_table()


def iter_history(store: str | os.PathLike[str], rows: int = 65536) -> Iterator[pa.Table]:
    """:func:`read_history`'s table a batch of ``rows`` at a time (a state's rows may span
    two batches), read as it goes."""
    import pyarrow.parquet as pq

    folder = stats_folder(store)
    try:
        gen = json.loads(read_fresh(folder / MANIFEST))["generation"]
        path = folder / f"history-{gen}.parquet"
        with contextlib.ExitStack() as stack:
            source = path if is_local(path) else stack.enter_context(path.open("rb"))
            parquet = stack.enter_context(pq.ParquetFile(source))
            for batch in parquet.iter_batches(batch_size=rows):
                yield history_table(pa.Table.from_batches([batch]))
    except FileNotFoundError:
        return


def read_stats(store: str | os.PathLike[str]) -> pa.Table:
    """The per-state table of the last fold (an empty one before any fold)."""
    from .stats import STATS_SCHEMA

    try:
        return read_parquet(stats_folder(store) / STATS_TABLE)
    except FileNotFoundError:
        return STATS_SCHEMA.empty_table()
