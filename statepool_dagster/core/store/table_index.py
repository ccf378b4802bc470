"""A run table's ``.index.json``: written and read fast (it grows with the run), its stamp,
and the rendered first rows it keeps (``views``)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from ..locations import AnyPath, is_local

if TYPE_CHECKING:
    from .parts import RunTable

# The index's key for its parts' entries; "files" before row groups held several checkpoints
# (an index of that time is not read, so code of that time never reads this one).
PARTS_KEY = "parts"
VIEWS = "views"  # the table's mark: rendered first rows, by the keys of their checkpoints
VIEW_CHARS = 1 << 16  # a rendered view longer than this is not kept in the index


def encode_index(marks: dict[str, Any], files: dict[str, Any]) -> bytes:
    """The index as JSON (msgspec: its size grows with the run, it is written at each build)."""
    index = {"marks": marks, PARTS_KEY: files}
    try:
        return msgspec.json.encode(index, order="sorted")
    except (msgspec.EncodeError, UnicodeEncodeError, TypeError, ValueError):  # e.g. a NaN
        return json.dumps(index, sort_keys=True).encode("utf-8")


def decode_index(data: bytes) -> dict[str, Any]:
    try:
        index = msgspec.json.decode(data)
    except msgspec.DecodeError:
        index = json.loads(data)
    if not isinstance(index, dict):
        raise ValueError("not an index")
    return index


def index_stamp(path: AnyPath) -> tuple[int, int, int] | None:
    """A local file's size, mtime and inode (``None``: absent, or not on a local disk)."""
    if not is_local(path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def cached_view(
    table: RunTable, label: str, columns: list[str], rows: int, render: Callable[[pa.Table], str]
) -> str:
    """``render`` of the table's first ``rows`` rows, kept in its marks while the checkpoints
    that hold them stay: a grown run's preview reads nothing (its first part may hold 512
    checkpoints, a footer that grows with the run). Call it before the table's ``save``."""
    shown, count = [label, *columns, str(rows)], 0
    for name in table.names():
        if count >= rows:
            break
        part = table.parts[name]
        shown.append(f"{name}:{part.key}")
        count += part.info.get("rows", 1)
    key = hashlib.blake2b("\0".join(shown).encode(), digest_size=16).hexdigest()
    views = table.marks.get(VIEWS)
    cached = views.get(label) if isinstance(views, dict) else None
    if isinstance(cached, list) and len(cached) == 2 and cached[0] == key:
        return cached[1]
    text = render(table.head(columns, rows))
    views = {k: v for k, v in (views or {}).items() if k != label}
    if len(text) <= VIEW_CHARS:  # a huge first prompt is read again, never indexed
        views[label] = [key, text]
    table.mark(**{VIEWS: views})
    return text
