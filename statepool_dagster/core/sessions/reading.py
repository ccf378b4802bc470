"""Read a session's stored states and prompts in batches, each state once."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..locations import AnyPath, forget_listing, is_local
from ..segments.names import parse_segment_name
from .store import SessionFolders


def _parts(folder: AnyPath) -> list[AnyPath]:
    try:
        forget_listing(folder)
        names = [p.name for p in folder.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    keyed = []
    for name in names:
        parsed = parse_segment_name(name.removesuffix(".parquet") + ".jsonl")
        if parsed is not None and name.endswith(".parquet"):
            keyed.append((parsed, folder / name))
    return [path for _, path in sorted(keyed)]


def _batches(path: AnyPath, columns: list[str] | None, batch_size: int) -> Iterator[pa.RecordBatch]:
    handle = None if is_local(path) else path.open("rb")
    try:
        with pq.ParquetFile(path if handle is None else handle) as parquet:
            yield from parquet.iter_batches(batch_size=batch_size, columns=columns)
    finally:
        if handle is not None:
            handle.close()


def iter_session_table(
    store_root: str | os.PathLike[str] | AnyPath,
    session: str,
    which: str = "states",
    columns: list[str] | None = None,
    batch_size: int = 256,
) -> Iterator[pa.RecordBatch]:
    """Batches of a session's ``states`` (first copies only) or ``prompts``, each id once.

    Segments are read by writer, then number; a state written again in a later
    segment is left out (its provenance stays in the states parts).
    """
    folders = SessionFolders(store_root, session)
    folder = folders.states if which == "states" else folders.prompts
    wanted = None if columns is None else list(dict.fromkeys(["state_id", *columns]))
    if which == "states" and wanted is not None and "first_copy" not in wanted:
        wanted.append("first_copy")
    seen: set[str] = set()
    for path in _parts(folder):
        for batch in _batches(path, wanted, batch_size):
            ids = batch.column("state_id").to_pylist()
            firsts = batch.column("first_copy").to_pylist() if which == "states" else None
            keep = []
            for i, state_id in enumerate(ids):
                if (firsts is None or firsts[i]) and state_id not in seen:
                    seen.add(state_id)
                    keep.append(i)
            if keep:
                out = batch.take(pa.array(keep, pa.int64()))
                if columns is not None:
                    out = out.select(columns)
                yield out


def stored_sessions(store_root: str | os.PathLike[str] | AnyPath) -> list[str]:
    """The sessions that have states in the store, by name."""
    from ..locations import as_path
    from ..names import SESSION_STATES

    folder = as_path(store_root) / SESSION_STATES
    try:
        forget_listing(folder)
        names = [p.name for p in folder.iterdir() if p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if not n.startswith("."))
