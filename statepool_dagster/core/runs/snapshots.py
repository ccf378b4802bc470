"""Find and read ``snapshots/skills_v<k>.json`` without ever building the embeddings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
from pydantic import ValidationError

from ..errors import BadRecordError
from ..locations import AnyPath
from ..rejects import RAW_LIMIT, Reject, escape_bytes
from ..states.models import SkillLibrary
from .embeddings import blank_embeddings

EMBEDDING_KEY = "_trigger_emb"
SNAPSHOT_NAME = re.compile(r"skills_v(\d+)\.json")

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
    """The snapshot files of a run, in numeric version order, and the files passed over."""

    snapshots: list[SnapshotFile] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)


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
    """List ``skills_v<int>.json`` files numerically (v2 before v10); say why others are skipped."""
    listing = SnapshotListing()
    if not snapshots_dir.is_dir():
        return listing
    try:
        entries = sorted(snapshots_dir.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        listing.ignored[snapshots_dir.name + "/"] = f"unreadable: {exc.strerror or exc}"
        return listing
    by_version: dict[int, SnapshotFile] = {}
    for entry in entries:
        name = entry.name
        if name.startswith("."):
            continue
        match = SNAPSHOT_NAME.fullmatch(name)
        if not match:
            listing.ignored[name] = "name is not skills_v<int>.json"
            continue
        if not entry.is_file():
            listing.ignored[name] = "not a regular file"
            continue
        version = int(match.group(1))
        canonical = f"skills_v{version}.json"
        held = by_version.get(version)
        if held is not None:
            # Keep the canonically named file (v3 over v03); the other is a duplicate.
            if name == canonical:
                listing.ignored[held.path.name] = f"duplicate of version {version} ({name})"
            else:
                listing.ignored[name] = f"duplicate of version {version} ({held.path.name})"
                continue
        by_version[version] = SnapshotFile(version, entry)
    listing.snapshots = [by_version[v] for v in sorted(by_version)]
    return listing


def parse_library(data: bytes) -> dict[str, Any]:
    """Parse a snapshot's bytes into the library dict the original script keeps.

    Keys keep their order and unknown fields survive; ``_trigger_emb`` is dropped
    from every card. ``ValueError`` says what is wrong with a bad file.
    """
    try:
        library = _parse_fast(data)
        if library is None:
            library = _parse_exact(data)
    except RecursionError:
        raise ValueError("not a JSON object: nested too deeply") from None
    _validate(library)
    return library


def _parse_fast(data: bytes) -> dict[str, Any] | None:
    """Blank the embeddings as bytes, parse the rest; ``None`` when anything is unusual."""
    blanked = blank_embeddings(data)
    if blanked is None:
        return None
    text, count = blanked
    try:
        library = _value.decode(text)
    except msgspec.MsgspecError:
        return None  # the exact path names the problem
    if not isinstance(library, dict) or EMBEDDING_KEY in library:
        return None
    cards = library.get("cards")
    if not isinstance(cards, list) or not all(isinstance(c, dict) for c in cards):
        return None
    removed = sum(c.pop(EMBEDDING_KEY, None) is not None for c in cards)
    # Every blanked member must have been a card's own; one elsewhere lost its value.
    return library if removed == count else None


def _parse_exact(data: bytes) -> dict[str, Any]:
    """Skip each card's embedding as raw JSON: slower, but exact for any input."""
    try:
        top = _top.decode(data)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"not a JSON object: {exc}") from None
    library: dict[str, Any] = {}
    for key, raw in top.items():
        if key == "cards":
            try:
                cards = _cards.decode(raw)
            except msgspec.MsgspecError as exc:
                raise ValueError(f"cards is not a list of objects: {exc}") from None
            library[key] = [
                {k: _value.decode(v) for k, v in card.items() if k != EMBEDDING_KEY}
                for card in cards
            ]
        else:
            library[key] = _value.decode(raw)
    return library


def _plain_card(card: Any) -> bool:
    if not isinstance(card, dict):
        return False
    card_id = card.get("card_id")
    return (
        isinstance(card_id, str | int)
        and not isinstance(card_id, bool)
        and isinstance(card.get("trigger"), str)
        and isinstance(card.get("program"), str)
        and isinstance(card.get("meta_info", {}), dict)
    )


def _validate(library: dict[str, Any]) -> None:
    """Check the library against :class:`SkillLibrary`; the common case without pydantic's cost."""
    cards = library.get("cards", [])
    if isinstance(cards, list) and all(_plain_card(c) for c in cards):
        return
    try:
        SkillLibrary.model_validate(library)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"not a skill library: {where}: {first['msg']}") from None


def read_snapshot(snapshot: SnapshotFile, display: str, strict: bool = False) -> Snapshot | Reject:
    """Read one snapshot file; a bad one becomes a :class:`Reject` (or raises with ``strict``)."""
    try:
        data = snapshot.path.read_bytes()
    except OSError as exc:
        reject = Reject(file=display, line=None, error=f"unreadable: {exc.strerror}", raw=None)
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
