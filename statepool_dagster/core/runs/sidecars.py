"""Optional per-checkpoint sidecars of a run: the Reflector's analysis and the last receipt.

Layout inside the run folder (both optional, ``k`` is the checkpoint of state
``<run>_ckpt<k>``)::

    analyses/analysis_v<k>.json    the Reflector's analysis (a JSON object) the curator read at k
    receipts/receipt_v<k>.txt      the receipt of the curator's previous round, UTF-8 text

A bad file is set aside as a reject (the state keeps the seed's defaults); a file
whose name does not match is listed as ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadRecordError
from ..locations import AnyPath
from ..rejects import RAW_LIMIT, UNSTORABLE, Reject, escape_bytes, storable
from .json_read import loads
from .opening import read_run_file

ANALYSES_DIR = "analyses"
RECEIPTS_DIR = "receipts"
ANALYSIS_NAME = re.compile(r"analysis_v(0|[1-9][0-9]*)\.json")
RECEIPT_NAME = re.compile(r"receipt_v(0|[1-9][0-9]*)\.txt")


@dataclass
class SidecarsRead:
    """Analyses and receipts by checkpoint, and the files that could not be used."""

    analyses: dict[int, dict[str, Any]] = field(default_factory=dict)
    receipts: dict[int, str] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)


def parse_analysis(data: bytes) -> dict[str, Any]:
    value = loads(data)  # what Python's json reads, as the analysis a user wrote it
    if not isinstance(value, dict):
        raise ValueError(f"analysis must be a JSON object (got {type(value).__name__})")
    if not storable(json.dumps(value, ensure_ascii=False)):  # no state could hold it
        raise ValueError(UNSTORABLE)
    return value


def parse_receipt(data: bytes) -> str:
    """The receipt's text; one trailing newline (as editors write it) is dropped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    return text.removesuffix("\n").removesuffix("\r")


@dataclass(frozen=True)
class _Kind:
    folder: str
    pattern: re.Pattern[str]
    template: str
    parse: Callable[[bytes], Any]


_ANALYSES = _Kind(ANALYSES_DIR, ANALYSIS_NAME, "analysis_v<int>.json", parse_analysis)
_RECEIPTS = _Kind(RECEIPTS_DIR, RECEIPT_NAME, "receipt_v<int>.txt", parse_receipt)


def _read_kind(
    run_dir: AnyPath,
    run: str,
    kind: _Kind,
    into: dict[int, Any],
    result: SidecarsRead,
    strict: bool,
) -> None:
    path = run_dir / kind.folder
    if not path.is_dir():
        return
    try:
        entries = sorted(path.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        result.ignored[f"{kind.folder}/"] = f"unreadable: {exc.strerror or exc}"
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        shown = f"{kind.folder}/{entry.name}"
        match = kind.pattern.fullmatch(entry.name)
        if not match:
            result.ignored[shown] = f"name is not {kind.template}"
            continue
        display = f"{run}/{shown}"
        try:
            data = read_run_file(entry, run_dir)  # never a FIFO, never out of the run
        except OSError as exc:
            error = f"unreadable: {exc.strerror or exc}"
            reject = Reject(file=display, line=None, error=error, raw=None)
        else:
            try:
                into[int(match.group(1))] = kind.parse(data)
                continue
            except ValueError as exc:
                reject = Reject(
                    file=display, line=None, error=str(exc), raw=escape_bytes(data[:RAW_LIMIT])
                )
        if strict:
            raise BadRecordError(reject.describe())
        result.rejects.append(reject)


def read_sidecars(run_dir: AnyPath, run: str, strict: bool = False) -> SidecarsRead:
    """The run's analyses and receipts by checkpoint; runs without them get empty maps."""
    result = SidecarsRead()
    _read_kind(run_dir, run, _ANALYSES, result.analyses, result, strict)
    _read_kind(run_dir, run, _RECEIPTS, result.receipts, result, strict)
    return result
