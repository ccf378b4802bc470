"""A run table's ``.index.json``: written and read fast (it grows with the run), and its stamp."""

from __future__ import annotations

import json
import os
from typing import Any

import msgspec

from ..locations import AnyPath, is_local

# The index's key for its parts' entries; "files" before row groups held several checkpoints
# (an index of that time is not read, so code of that time never reads this one).
PARTS_KEY = "parts"


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
