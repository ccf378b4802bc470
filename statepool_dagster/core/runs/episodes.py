"""Read ``episodes.jsonl`` line by line, setting aside the lines that cannot be used."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from pydantic import ValidationError

from ..errors import BadRecordError
from ..locations import AnyPath
from ..rejects import Reject, escape_bytes
from ..states.models import Episode

_decode = msgspec.json.Decoder().decode


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

    @property
    def lines(self) -> int:
        return len(self.episodes) + len(self.rejects) + self.blank_lines


def parse_episode_line(raw: bytes) -> tuple[int, dict[str, Any]]:
    """Parse one non-blank line into ``(version, record)``; ``ValueError`` says why not."""
    try:
        record = _decode(raw)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object (got {type(record).__name__})")
    version = record.get("skill_lib_version", 0)
    if type(version) is int:  # what Episode's StrictInt accepts, without building the model
        return version, record
    try:
        episode = Episode.model_validate(record)
    except ValidationError:
        version = record.get("skill_lib_version")
        raise ValueError(f"skill_lib_version must be an integer, got {version!r}") from None
    return episode.skill_lib_version, record


def iter_lines(path: AnyPath) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_bytes)`` without the line ending, streaming the file."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            yield number, raw.rstrip(b"\r\n")


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
    data: bytes, display: str, first_line: int = 1, strict: bool = False
) -> EpisodesRead:
    """:func:`read_episodes` on bytes already read, numbering lines from ``first_line``.

    What an append-aware reader parses: the part of a file after what it has seen.
    """
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the file's last line ending, not a line of its own
    result = EpisodesRead()
    numbered = ((n, raw.rstrip(b"\r\n")) for n, raw in enumerate(lines, first_line))
    _parse_lines(result, numbered, display, strict)
    return result


def _parse_lines(
    result: EpisodesRead, numbered: Iterable[tuple[int, bytes]], display: str, strict: bool
) -> None:
    for number, raw in numbered:
        if not raw.strip():
            result.blank_lines += 1
            continue
        try:
            version, record = parse_episode_line(raw)
        except ValueError as exc:
            reject = Reject(file=display, line=number, error=str(exc), raw=escape_bytes(raw))
            _reject(result, reject, strict)
            continue
        result.episodes.append(EpisodeLine(number, version, record))


def _reject(result: EpisodesRead, reject: Reject, strict: bool) -> None:
    if strict:
        raise BadRecordError(reject.describe())
    result.rejects.append(reject)
