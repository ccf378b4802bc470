"""Records set aside: what could not be used, where it was, and why."""

from __future__ import annotations

from pydantic import BaseModel

RAW_LIMIT = 4096  # chars of a whole rejected file kept inline; the file itself stays on disk
# Python's json reads a lone surrogate escape (`"\ud800"`); UTF-8 cannot hold it.
UNSTORABLE = "not storable as UTF-8: a lone surrogate escape in a string"


class Reject(BaseModel):
    """One unusable record: an episode line (``line`` set) or a whole snapshot file."""

    file: str
    line: int | None
    error: str
    raw: str | None

    def describe(self) -> str:
        return bad_line(self.file, self.line, self.error)


def bad_line(file: str, line: int | None, reason: str) -> str:
    """The one way a bad line (or a whole bad file) is named: ``<file> line <n>: <why>``."""
    where = file if line is None else f"{file} line {line}"
    return f"{where}: {reason}"


def not_json(exc: Exception) -> str:
    """Why a line is not JSON, as every reader says it."""
    return f"not valid JSON: {exc}"


def escape_bytes(raw: bytes) -> str:
    """Text of ``raw`` with undecodable bytes escaped as ``\\xNN``, so nothing is lost."""
    return raw.decode("utf-8", errors="backslashreplace")
