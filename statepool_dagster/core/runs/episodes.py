"""Read ``episodes.jsonl`` line by line, setting aside the lines that cannot be used.

Lines are what the original's ``open()`` in text mode yields: ended by ``\n``, ``\r\n``
or a bare ``\r`` (universal newlines). A line is blank only if it holds nothing but
JSON whitespace (space, tab); ``\x0b`` or ``\x0c`` is not JSON, so such a line is a
reject, never silently skipped. Each line is read as Python's ``json`` reads it.

A file that only grew is read on from where the last build stopped. Whether the bytes
before that point are unchanged is told by a CRC-32 of all of them, read again on each
growth (one of the few costs of absorbing a checkpoint that grow with the run,
docs/performance.md). Every byte is compared, never a sample: an edit of up to four bytes
in a row is always seen, and any other edit, even one that keeps every byte count, but for
a chance of one in 2**32 (CRC-32 tells edits, not forgeries). A mark of an older build (a
SHA-256 of the same bytes) is still checked, once.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ..errors import BadRecordError
from ..locations import AnyPath, is_local
from ..names import EPISODES_FILE
from ..rejects import Reject, escape_bytes
from .json_read import INT64_MAX, INT64_MIN, loads
from .opening import open_run_file, present

_JSON_WS = b" \t\r\n"
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")  # one line and its universal end


@dataclass(frozen=True)
class EpisodeLine:
    """A usable episode: its 1-based line, its library version and the record as read."""

    line: int
    version: int
    record: dict[str, Any]


@dataclass
class EpisodesRead:
    """What one pass over ``episodes.jsonl`` produced; every line is accounted for."""

    episodes: list[EpisodeLine] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    blank_lines: int = 0
    notes: list[str] = field(default_factory=list)  # values kept that a flat column cannot hold

    @property
    def lines(self) -> int:
        return len(self.episodes) + len(self.rejects) + self.blank_lines


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"


def episode_version(record: dict[str, Any]) -> int:
    """The record's ``skill_lib_version`` (0 when absent) as the original pairs it.

    An integral float is that integer (``1.0`` pairs with ``skills_v1.json`` there too);
    a boolean, a string, any other float, or an integer outside 64 bits is a
    ``ValueError`` naming the field.
    """
    version = record.get("skill_lib_version", 0)
    if type(version) is float and version.is_integer():
        version = int(version)
    if type(version) is not int:
        raise ValueError(f"skill_lib_version must be an integer, got {_shown(version)}")
    if not INT64_MIN <= version <= INT64_MAX:
        raise ValueError(f"skill_lib_version out of range for a 64-bit integer: {_shown(version)}")
    return version


def parse_episode_line(raw: bytes) -> tuple[int, dict[str, Any]]:
    """Parse one non-blank line into ``(version, record)``; ``ValueError`` says why not."""
    try:
        record = loads(raw)
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object (got {type(record).__name__})")
    return episode_version(record), record


def column_notes(record: dict[str, Any], where: str) -> list[str]:
    """What a flat column leaves empty because it cannot hold the record's value."""
    realtime = record.get("realtime")
    if type(realtime) is int:
        try:
            float(realtime)
        except OverflowError:
            return [f"{where}: realtime does not fit a float; its column is empty (record kept)"]
    return []


def lines_with_ends(data: bytes | bytearray) -> Iterator[bytes | bytearray]:
    """Each line of ``data`` with its own line end (``\\n``, ``\\r\\n`` or ``\\r``).

    The ends stay on: both parsers take them as trailing whitespace, and a chunk of one
    huge line is then parsed without a copy of it (``data`` itself is yielded).
    """
    size = len(data)
    if b"\r" in data:
        for match in _LINE.finditer(data):
            yield data if match.end() - match.start() == size else match.group()
        return
    start = 0
    while start < size:
        end = data.find(b"\n", start)
        end = size if end < 0 else end + 1
        yield data if end - start == size else data[start:end]
        start = end


def iter_lines(path: AnyPath, run_dir: AnyPath | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_bytes)`` (with its line end), streaming the file.

    Locally the file is opened through ``opening.open_run_file`` (never a FIFO, never
    out of ``run_dir``, by default the file's folder).
    """
    if is_local(path):
        f = os.fdopen(open_run_file(path, run_dir or path.parent), "rb")
    else:
        f = path.open("rb")
    number = 0
    with f:
        for chunk in f:
            for raw in lines_with_ends(chunk):
                number += 1
                yield number, raw


def read_episodes(path: AnyPath, display: str, strict: bool = False) -> EpisodesRead:
    """Read every line of ``path`` (shown as ``display`` in messages).

    Blank lines are skipped; any other line that cannot be used becomes a
    :class:`Reject` (or, with ``strict``, a :class:`BadRecordError` naming the line).
    A file that cannot be read at all is one reject with no line number.
    """
    result = EpisodesRead()
    try:
        _parse_lines(result, iter_lines(path), display, strict)
    except OSError as exc:
        error = f"unreadable: {exc.strerror or exc}"
        _reject(result, Reject(file=display, line=None, error=error, raw=None), strict)
    return result


def parse_episodes(
    data: bytes | bytearray, display: str, first_line: int = 1, strict: bool = False
) -> EpisodesRead:
    """:func:`read_episodes` on bytes already read, numbering lines from ``first_line``.

    What an append-aware reader parses: the part of a file after what it has seen.
    """
    result = EpisodesRead()
    _parse_lines(result, enumerate(lines_with_ends(data), first_line), display, strict)
    return result


def _parse_lines(
    result: EpisodesRead, numbered: Iterable[tuple[int, bytes]], display: str, strict: bool
) -> None:
    """Classify each numbered line (line ends still on) into episodes, rejects and blanks."""
    for number, raw in numbered:
        if raw[:1] in (b"", b" ", b"\t", b"\r", b"\n") and not raw.strip(_JSON_WS):
            result.blank_lines += 1
            continue
        try:
            version, record = parse_episode_line(raw)
        except ValueError as exc:
            text = escape_bytes(raw.rstrip(b"\r\n"))
            reject = Reject(file=display, line=number, error=str(exc), raw=text)
            _reject(result, reject, strict)
            continue
        result.episodes.append(EpisodeLine(number, version, record))
        result.notes.extend(column_notes(record, f"{display} line {number}"))


def _reject(result: EpisodesRead, reject: Reject, strict: bool) -> None:
    if strict:
        raise BadRecordError(reject.describe())
    result.rejects.append(reject)


CHUNK = 1 << 18  # bytes read at a time; a batch is written before the next one is read


def open_episodes(
    run_dir: AnyPath, display: str, strict: bool
) -> tuple[BinaryIO | None, Reject | None]:
    """The run's episodes.jsonl opened for reading (none if absent), or the reject saying why."""
    path = run_dir / EPISODES_FILE
    if not present(path):
        return None, None
    try:
        if not is_local(path):
            return path.open("rb"), None
        return os.fdopen(open_run_file(path, run_dir), "rb"), None
    except OSError as exc:  # a FIFO, a loop, a link out of the run: refused, never opened
        reject = Reject(
            file=display, line=None, error=f"unreadable: {exc.strerror or exc}", raw=None
        )
        if strict:
            raise BadRecordError(reject.describe()) from None
        return None, reject


DIGEST_READ = 1 << 20


def _prefix_crc(f: BinaryIO, size: int, sha256: bool = False) -> tuple[int, str] | None:
    """The CRC-32 of the file's first ``size`` bytes (the file left after them), and their
    SHA-256 if asked (an older build's mark); ``None`` if the file is shorter.

    Read into one buffer, reused: a new block per read costs its pages' first touch each
    time, a fifth of the checksum's own time.
    """
    f.seek(0)
    crc, h = 0, hashlib.sha256() if sha256 else None
    left = size
    view = memoryview(bytearray(min(DIGEST_READ, size)))
    while left > 0 and (n := f.readinto(view[: min(len(view), left)])):
        crc = zlib.crc32(view[:n], crc)
        if h is not None:
            h.update(view[:n])
        left -= n
    return None if left else (crc, "" if h is None else h.hexdigest())


def same_prefix(f: BinaryIO, seen: dict) -> int | None:
    """The CRC-32 of the bytes the last build read, if the file still starts with them."""
    size, crc, sha = seen.get("bytes"), seen.get("crc32"), seen.get("digest")
    counts = (size, seen.get("lines"), seen.get("blank"))
    if any(type(n) is not int or n < 0 for n in counts):
        return None  # a mark this code did not write (a hand edit): the run is read again
    if type(crc) is int:
        found = _prefix_crc(f, size)
        return crc if found is not None and found[0] == crc else None
    if isinstance(sha, str):  # an older build's mark: its SHA-256 checked, a CRC from now on
        found = _prefix_crc(f, size, sha256=True)
        return found[0] if found is not None and found[1] == sha else None
    return None


def chunks(f: BinaryIO) -> Iterator[tuple[bytes | bytearray, bool]]:
    """``(bytes, complete)``: runs of whole lines, then a last line still being written.

    A line longer than a chunk is gathered in one growing buffer and handed over alone,
    as that buffer: never copied again, and no longer held here while it is read.
    """
    pending = bytearray()
    while block := f.read(CHUNK):
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            pending += block
            continue
        if len(pending) >= CHUNK:
            first = block.find(b"\n") + 1
            pending += block[:first]
            held, pending = [pending], bytearray()
            yield held.pop(), True
            if first < cut:
                yield block[first:cut], True
        elif pending:
            pending += block[:cut]
            yield bytes(pending), True
        else:
            yield block[:cut], True
        pending = bytearray(block[cut:])
    if pending:
        held, pending = [pending], bytearray()
        yield held.pop(), False
