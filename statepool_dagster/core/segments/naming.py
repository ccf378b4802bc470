"""How a sealed segment is named, and how an unsealed one hides from readers."""

from __future__ import annotations

import re

from ..names import checked_key_name, key_name_problem

SEGMENT_SUFFIX = ".jsonl"
SEQ_DIGITS = 6
# ``<writer>-<seq>.jsonl``: the writer's name may hold dashes, the sequence is the last one.
SEGMENT_NAME = re.compile(r"(?P<writer>[A-Za-z0-9._-]+)-(?P<seq>[0-9]{6,})\.jsonl")
MAX_WRITER_NAME = 120


def writer_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a segment writer, or ``None`` when it can."""
    return key_name_problem(name, MAX_WRITER_NAME)


def check_writer_name(name: str) -> str:
    """``name`` when it can name a writer; ``ValueError`` naming the rule otherwise."""
    return checked_key_name(name, "writer", MAX_WRITER_NAME)


def segment_name(writer: str, seq: int) -> str:
    """The sealed name of ``writer``'s segment number ``seq``."""
    return f"{writer}-{seq:0{SEQ_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> tuple[str, int] | None:
    """``(writer, seq)`` of a sealed segment's file name; ``None`` for anything else."""
    match = SEGMENT_NAME.fullmatch(name)
    if match is None:
        return None
    return match["writer"], int(match["seq"])


def unsealed_name(writer: str, seq: int, token: str) -> str:
    """A dot name: every reader skips it, so an unsealed tail is never listed."""
    return f".{segment_name(writer, seq)}.open-{token}"
