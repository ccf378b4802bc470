"""List sealed segments cheaply and read their lines with bounded memory."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..locations import (
    RANGED_BLOCK,
    AnyPath,
    as_path,
    entry_name,
    fresh_listing,
    info_fields,
    is_local,
)
from .naming import parse_segment_name

DEFAULT_MAX_LINE = 256 << 20
_SKIP_CHUNK = 1 << 20
_READ_BUFFER = 1 << 20


@dataclass(frozen=True)
class Segment:
    """One sealed segment: its file name, writer, number, size and modification time."""

    name: str
    writer: str
    seq: int
    size: int
    mtime: float
    path: AnyPath


@dataclass(frozen=True)
class OversizeLine:
    """A line longer than the reader's limit: skipped unread, only its length kept."""

    length: int


def list_segments(folder: str | os.PathLike[str] | AnyPath) -> list[Segment]:
    """The sealed segments in ``folder``, by writer then number; unsealed (dot) names never.

    One directory listing: ``os.scandir`` locally, one ``ls`` with details through fsspec
    (listed afresh: a long-lived reader sees what other processes sealed since).
    """
    folder = as_path(folder)
    found: list[Segment] = []
    if is_local(folder):
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    parsed = parse_segment_name(entry.name)
                    if parsed is None or not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                    found.append(
                        Segment(entry.name, *parsed, st.st_size, st.st_mtime, folder / entry.name)
                    )
        except (FileNotFoundError, NotADirectoryError):
            return []
    else:
        try:
            infos = fresh_listing(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        for info in infos:
            name = entry_name(info)
            parsed = parse_segment_name(name)
            if parsed is None or info.get("type") == "directory":
                continue
            size, mtime, _ = info_fields(info)
            found.append(Segment(name, *parsed, size, mtime, folder / name))
    found.sort(key=lambda s: (s.writer, s.seq))
    return found


@contextlib.contextmanager
def open_segment(path: AnyPath, block_size: int | None = None) -> Iterator[BinaryIO]:
    """A sealed segment opened for reading, whose ``readline`` takes a size on any filesystem.

    fsspec's buffered files (s3fs, gcsfs) take none: they are read through a buffer.
    ``block_size``: how much an object store's file fetches at a time (its default is
    large, made for reading a whole file).
    """
    if is_local(path):
        with open(path, "rb") as f:
            yield f
        return
    options = {} if block_size is None else {"block_size": block_size}
    with path.open("rb", **options) as raw:
        if _readline_takes_size(raw):
            yield raw
            return
        with io.BufferedReader(raw, _READ_BUFFER) as f:
            yield f


def _readline_takes_size(f: object) -> bool:
    from fsspec.spec import AbstractBufferedFile

    return not isinstance(f, AbstractBufferedFile)


def iter_segment_lines(
    path: AnyPath, max_line: int = DEFAULT_MAX_LINE
) -> Iterator[tuple[int, bytes | OversizeLine]]:
    """``(line_number, line)`` for each line of a sealed segment, line end removed.

    A line longer than ``max_line`` bytes is read past in chunks and given as an
    :class:`OversizeLine`: memory holds at most one line of ``max_line`` bytes.
    Blank lines are skipped (numbers still count them).
    """
    for number, _, line in iter_segment_records(path, max_line):
        held = [line]
        del line
        yield number, held.pop()  # see iter_segment_records


def iter_segment_records(
    path: AnyPath, max_line: int = DEFAULT_MAX_LINE
) -> Iterator[tuple[int, int, bytes | OversizeLine]]:
    """``(line_number, byte offset, line)``: :func:`iter_segment_lines` with where each line
    starts, so that one line can be read again alone (:func:`read_segment_line`)."""
    with open_segment(path) as f:
        number, offset = 0, 0
        while True:
            line = f.readline(max_line + 1)
            if not line:
                return
            number += 1
            start, offset = offset, offset + len(line)
            if len(line) > max_line and not line.endswith(b"\n"):
                length = len(line)
                while True:
                    chunk = f.readline(_SKIP_CHUNK)
                    length += len(chunk)
                    offset += len(chunk)
                    if not chunk or chunk.endswith(b"\n"):
                        break
                yield number, start, OversizeLine(length)
                continue
            line = line.rstrip(b"\r\n")
            if line and not line.isspace():  # strip() would copy a huge line
                held = [line]
                del line
                # Popped as it is yielded: this frame keeps no reference to the line while
                # the reader works on it (a huge line is then freed as soon as it is read).
                yield number, start, held.pop()


def read_segment_line(path: AnyPath, offset: int, max_line: int = DEFAULT_MAX_LINE) -> bytes:
    """The line of a sealed segment that starts at ``offset``, line end removed."""
    with open_segment(path, block_size=RANGED_BLOCK) as f:  # not the whole segment
        f.seek(offset)
        return f.readline(max_line + 1).rstrip(b"\r\n")
