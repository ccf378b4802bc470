"""Find and read ``snapshots/skills_v<k>.json`` without ever building the embeddings."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import BadRecordError
from ..locations import AnyPath, is_local
from ..rejects import RAW_LIMIT, Reject, escape_bytes
from .json_read import (
    EMBEDDING_KEY,
    INT64_MAX,
    KEY,
    blank_embeddings,
    check_depth,
    has_long_digit_run,
    is_utf8,
    python_loads,
)
from .opening import FolderGate, read_run_file, run_file_problem

SNAPSHOT_NAME = re.compile(r"skills_v([0-9]+)\.json")  # ASCII digits only
SNAPSHOT_TEMPLATE = "skills_v<ASCII digits>.json"
# Below this size the exact reader is as fast: blanking pays off on embedding arrays, and
# a small library has few ([Input rules](docs/input-rules.md) gives the figures).
FAST_PATH_BYTES = 16 * 1024
# ``cards`` values the original iterates as no card at all: it keeps such a library as is.
NO_CARDS = ([], {}, "")

# Values stay raw JSON until we know they are wanted: the embedding arrays are
# scanned past, never turned into Python floats (the original's main cost).
_top = msgspec.json.Decoder(dict[str, msgspec.Raw])
_cards = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_value = msgspec.json.Decoder()


@dataclass(frozen=True)
class SnapshotFile:
    """A file that names a snapshot version."""

    version: int
    path: AnyPath


@dataclass
class SnapshotListing:
    """The snapshot files of a run, in numeric version order, and the files passed over.

    ``named``: each one's version and file name (a long run's listing makes no path until
    one is wanted: ``file``, ``snapshots``).
    """

    folder: AnyPath
    named: list[tuple[int, str]] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)

    def file(self, version: int, name: str) -> SnapshotFile:
        return SnapshotFile(version, self.folder / name)

    @property
    def snapshots(self) -> list[SnapshotFile]:
        return [self.file(version, name) for version, name in self.named]


@dataclass(frozen=True)
class Snapshot:
    """A parsed library (embeddings removed) and the version its file name gives."""

    version: int
    file: str
    library: dict[str, Any]

    @property
    def declared_version(self) -> Any:
        return self.library.get("version")


def list_snapshots(snapshots_dir: AnyPath) -> SnapshotListing:
    """List ``skills_v<int>.json`` files numerically (v2 before v10); say why others are skipped.

    A well-named entry that is not a readable regular file inside the run (a FIFO, a
    directory, a link out of the run or a link loop) is listed: reading it makes the
    reject that says why (:func:`read_snapshot` never opens it).
    """
    listing = SnapshotListing(snapshots_dir)
    if not snapshots_dir.is_dir():
        if is_local(snapshots_dir) and os.path.lexists(snapshots_dir):
            problem = run_file_problem(snapshots_dir, snapshots_dir.parent) or "not a folder"
            listing.ignored[snapshots_dir.name + "/"] = problem  # a loop, a FIFO, a file
        return listing
    try:
        if is_local(snapshots_dir):
            names = sorted(os.listdir(snapshots_dir))
        else:
            names = sorted(p.name for p in snapshots_dir.iterdir())
    except OSError as exc:
        listing.ignored[snapshots_dir.name + "/"] = f"unreadable: {exc.strerror or exc}"
        return listing
    by_version: dict[int, str] = {}
    duplicates: list[tuple[int, str]] = []
    for name in names:
        if name.startswith("."):
            continue
        match = SNAPSHOT_NAME.fullmatch(name)
        if not match:
            listing.ignored[name] = f"name is not {SNAPSHOT_TEMPLATE}"
            continue
        version = int(match.group(1))
        if version > INT64_MAX:
            listing.ignored[name] = "version in the name is out of range (above 2**63-1)"
            continue
        held = by_version.get(version)
        if held is not None:
            # The original reads the names in this order and its last one's state stays:
            # keep the later name (v3 over v03, v07 over v007, v00 over v0).
            duplicates.append((version, held))
        by_version[version] = name
    for version, held in duplicates:
        listing.ignored[held] = f"duplicate of version {version} ({by_version[version]})"
    listing.named = [(v, by_version[v]) for v in sorted(by_version)]
    return listing


def parse_library(data: bytes) -> dict[str, Any]:
    """Parse a snapshot's bytes into the library dict the original script keeps.

    Keys keep their order and unknown fields survive; ``_trigger_emb`` is dropped
    from every card. What Python's ``json`` reads is read (``NaN``, ``1e999``, …);
    what it refuses, and anything nested deeper than ``json_read.DEPTH_LIMIT``, is a
    ``ValueError`` saying what is wrong. Card fields are not checked here: the
    original keeps such a library, and only its prompt fails (see ``render``).
    """
    blanked = blank_embeddings(data) if len(data) >= FAST_PATH_BYTES else None
    check_depth(data if blanked is None else blanked[0])  # the same depth, fewer bytes
    library = None if blanked is None else _parse_blanked(*blanked)
    if library is None:
        library = _parse_exact(data)
    if library is None:
        library = _parse_python(data)
    _validate(library)
    return library


def _embedding_keys(value: Any) -> int:
    """How many members named ``_trigger_emb`` ``value`` holds, at any depth."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += EMBEDDING_KEY in item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _parse_blanked(text: bytes, count: int) -> dict[str, Any] | None:
    """The library from its text with ``count`` embeddings blanked (``None``: anything odd)."""
    try:
        library = _value.decode(text)
    except (msgspec.MsgspecError, RecursionError):
        return None  # the exact path names the problem
    if not isinstance(library, dict):
        return None
    cards = library.get("cards")
    if not isinstance(cards, list) or not all(isinstance(c, dict) for c in cards):
        return None
    # Every blanked array must have been a card's own, and every member of that name in
    # the file one that was blanked (a `\u`-escaped spelling is not): else the exact path.
    own = sum(EMBEDDING_KEY in c for c in cards)
    if own != count:
        return None
    # Another member of that name would be a literal occurrence left unblanked, or a
    # `\u`-escaped spelling: only then is the decoded library walked to count them.
    if (b"\\u" in text or text.count(KEY) != count) and _embedding_keys(library) != count:
        return None
    for card in cards:
        card.pop(EMBEDDING_KEY, None)
    return library


def _parse_exact(data: bytes) -> dict[str, Any] | None:
    """Skip each card's embedding as raw JSON; ``None`` for what only Python's json reads.

    A value skipped as raw JSON (an embedding, or a member a later duplicate overwrites)
    is never checked for UTF-8 or for an integer past Python's digit limit by msgspec;
    the original refuses the whole file for either (its text-mode ``open()``, its
    ``json``), so such a file goes to Python's json, whose reject names it.
    """
    if not is_utf8(data) or has_long_digit_run(data):
        return None
    try:
        top = _top.decode(data)
        library: dict[str, Any] = {}
        for key, raw in top.items():
            if key == "cards":
                library[key] = [
                    {k: _value.decode(v) for k, v in card.items() if k != EMBEDDING_KEY}
                    for card in _cards.decode(raw)
                ]
            else:
                library[key] = _value.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None
    return library


def _parse_python(data: bytes) -> dict[str, Any]:
    """The original's own reading: ``json`` builds it all, then each card loses its embedding."""
    try:
        library = python_loads(data)
    except ValueError as exc:
        raise ValueError(f"not a JSON object: {exc}") from None
    if not isinstance(library, dict):
        raise ValueError(f"not a JSON object (got {type(library).__name__})")
    cards = library.get("cards", [])
    if cards in NO_CARDS:
        return library
    if not isinstance(cards, list) or not all(isinstance(c, dict) for c in cards):
        raise ValueError("cards is not a list of objects")
    for card in cards:
        card.pop(EMBEDDING_KEY, None)
    return library


def _validate(library: dict[str, Any]) -> None:
    """What the original needs to keep a library: an object whose ``cards`` are objects."""
    cards = library.get("cards", [])
    if cards in NO_CARDS:
        return
    if not isinstance(cards, list):
        raise ValueError(f"not a skill library: cards: not a list (got {type(cards).__name__})")
    for i, card in enumerate(cards):
        if not isinstance(card, dict):
            raise ValueError(f"not a skill library: cards.{i}: not an object")


def read_snapshot(
    snapshot: SnapshotFile, display: str, strict: bool = False, gate: FolderGate | None = None
) -> Snapshot | Reject:
    """Read one snapshot file; a bad one becomes a :class:`Reject` (or raises with ``strict``).

    ``gate``: the run's, when a stage reads many snapshots (each folder resolved once).
    """
    try:
        if gate is None:
            data = read_run_file(snapshot.path, snapshot.path.parent.parent)
        else:
            data = gate.read(snapshot.path)
    except OSError as exc:
        reject = Reject(
            file=display, line=None, error=f"unreadable: {exc.strerror or exc}", raw=None
        )
    else:
        try:
            return Snapshot(snapshot.version, display, parse_library(data))
        except ValueError as exc:
            reject = Reject(
                file=display, line=None, error=str(exc), raw=escape_bytes(data[:RAW_LIMIT])
            )
    if strict:
        raise BadRecordError(reject.describe())
    return reject
