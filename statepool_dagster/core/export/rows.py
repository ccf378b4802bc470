"""What an export holds: its options, run-level splits, one row per state."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import Settings
from ..names import EXPORT_FORMATS

if TYPE_CHECKING:
    from ..store.cells import TextCell

Format = Literal["verl", "trl", "pool"]  # the words of EXPORT_FORMATS, for type checkers


FORMATS: tuple[Format, ...] = EXPORT_FORMATS


SPLITS = ("train", "val", "test")
MANIFEST = ".statepool_export"  # hidden and not *.json: loaders glob *.json and skip dot files
ABILITY = "skill_curation"
NOT_RECORDED = {"next_version": None, "ops": [], "note": "not recorded: rematerialize the run"}

# A session state has no next library: nothing to take its reference ops from.
NO_REFERENCE = {"next_version": None, "ops": [], "note": "a session state: no reference ops"}

NO_REFERENCE_JSON = json.dumps(NO_REFERENCE)

RUNS, SESSIONS = "runs", "sessions"
STATE_SOURCES = (RUNS, SESSIONS)


class ExportOptions(BaseModel):
    """How runs are split; the fractions are shares of runs, not of rows."""

    model_config = ConfigDict(frozen=True)

    val_fraction: float = Field(0.1, ge=0, le=1)
    test_fraction: float = Field(0.0, ge=0, le=1)
    seed: int = 0

    @model_validator(mode="after")
    def _fractions_fit(self) -> ExportOptions:
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val and test fractions add up to 1 or more: train would get no run")
        return self

    @staticmethod
    def from_settings(settings: Settings) -> ExportOptions:
        return ExportOptions(
            val_fraction=settings.export_val_fraction,
            test_fraction=settings.export_test_fraction,
            seed=settings.export_seed,
        )

    @property
    def splits(self) -> list[str]:
        """The splits this export writes (val and test only when their fraction is above 0)."""
        wanted = {"train": True, "val": self.val_fraction > 0, "test": self.test_fraction > 0}
        return [s for s in SPLITS if wanted[s]]


class SourceOptions(BaseModel):
    """Which sources an export reads, and how fresh its session states must be."""

    model_config = ConfigDict(frozen=True)

    sources: tuple[str, ...] = STATE_SOURCES
    max_staleness: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _known(self) -> SourceOptions:
        unknown = [s for s in self.sources if s not in STATE_SOURCES]
        if unknown or not self.sources:
            raise ValueError(f"sources {','.join(self.sources)!r}: a list of runs, sessions")
        return self

    @staticmethod
    def parse(text: str | None, max_staleness: int | None = None) -> SourceOptions:
        """From ``"runs,sessions"`` (``None``: both)."""
        if not text:
            return SourceOptions(sources=STATE_SOURCES, max_staleness=max_staleness)
        names = tuple(s.strip() for s in text.split(",") if s.strip())
        return SourceOptions(sources=names, max_staleness=max_staleness)

    @staticmethod
    def from_settings(settings: Settings) -> SourceOptions:
        return SourceOptions.parse(settings.export_sources, settings.export_max_staleness)

    @property
    def active(self) -> bool:
        return self.sources != STATE_SOURCES or self.max_staleness is not None


def split_of(run: str, options: ExportOptions) -> str:
    """The run's split: a uniform draw from ``hash(seed, run)``, test first, then val."""
    digest = hashlib.blake2b(f"{options.seed}:{run}".encode(), digest_size=8).digest()
    draw = int.from_bytes(digest, "big") / 2**64
    if draw < options.test_fraction:
        return "test"
    if draw < options.test_fraction + options.val_fraction:
        return "val"
    return "train"


@dataclass(frozen=True)
class ExportRow:
    """One state, ready for a trainer: its prompt, its state JSON and its reference ops.

    A run state's prompt and state, as the export reads them, are texts left in Arrow
    (:class:`~..store.cells.TextCell`: ``len`` and ``str`` as a ``str``'s); :meth:`in_python`
    makes them ``str``.
    """

    index: int  # position within its split
    split: str
    state_id: str
    run: str | None  # None for a session state
    version: int | None
    dataset: str
    prompt: str | TextCell
    state: str | TextCell
    reference_ops: str
    prompt_tokens: int | None = None  # set by export.gate when a tokenizer counted it
    source: str = RUNS
    session: str | None = None
    policy_step: int | None = None
    weight: float | None = None  # set when the export weighs states (--weight)
    stand_in_for: str | None = None  # live pool, asked for stand-ins: the state not readable

    @property
    def ops(self) -> dict[str, Any]:
        return json.loads(self.reference_ops)

    def ground_truth(self) -> str:
        """The reference ops as the curator would answer them: a JSON list of operations."""
        return json.dumps(self.ops["ops"], ensure_ascii=False)

    def messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]

    def in_python(self) -> ExportRow:
        """This row with its prompt and state as ``str``."""
        if isinstance(self.prompt, str) and isinstance(self.state, str):
            return self
        return dataclasses.replace(self, prompt=str(self.prompt), state=str(self.state))


class _Dataset(msgspec.Struct):
    dataset: Any = ""


_dataset = msgspec.json.Decoder(_Dataset).decode


_HEAD, _DATASET = '{"state_id": "', ', "dataset": "'
_HEAD_BYTES = 1024  # of a text left in Arrow, read for its first two members (an id, a name)


def state_dataset(text: str | TextCell, assembled: bool = False) -> str:
    """``str(state.get("dataset", ""))`` of a state's text, its other members skipped unbuilt;
    by ``json`` where msgspec would refuse the text (a NaN, a huge integer, ...).

    ``assembled``: the text is one the states stage assembled (its members in their fixed
    order, each once), so the dataset is the second member's string, read alone (of a text
    left in Arrow, from its first bytes: past them, from the whole).
    """
    whole = text if isinstance(text, str) else text.utf8()
    if assembled:
        head = whole
        if not isinstance(head, str):
            # A character cut at the head's end is dropped: a member cut there is then
            # unterminated, and read from the whole.
            head = head[:_HEAD_BYTES].tobytes().decode(errors="ignore")
        if head.startswith(_HEAD):
            try:
                end = json.decoder.scanstring(head, len(_HEAD))[1]
                if head.startswith(_DATASET, end):
                    return json.decoder.scanstring(head, end + len(_DATASET))[0]
            except ValueError:
                pass
    try:
        return str(_dataset(whole).dataset)
    except (msgspec.MsgspecError, ValueError):
        state = json.loads(whole if isinstance(whole, str) else bytes(whole))
        return str(state.get("dataset", "") if isinstance(state, dict) else "")


def run_row(
    prompt_row: dict[str, Any],
    state_row: dict[str, Any],
    *,
    index: int,
    split: str,
    state_id: str,
    run: str,
    weight: float | None = None,
    assembled: bool = False,
) -> ExportRow:
    """A run state's row, joined from its prompts-table and states-table rows: the one join
    the export and the live pool both use (``assembled``: see :func:`state_dataset`)."""
    ops = state_row.get("reference_ops") or prompt_row.get("reference_ops")
    return ExportRow(
        index=index,
        split=split,
        state_id=state_id,
        run=run,
        version=int(state_row["version"]),
        dataset=state_dataset(state_row["state"], assembled),
        prompt=prompt_row["prompt"],
        state=state_row["state"],
        reference_ops=ops or json.dumps(NOT_RECORDED),
        weight=weight,
    )


def state_version(state: dict) -> int | None:
    """A parsed state's library version (``None``: it records none)."""
    version = (state.get("lib_snapshot") or {}).get("version")
    return version if type(version) is int else None


def session_row(
    text: str,
    state: dict[str, Any],
    prompt: str,
    *,
    index: int,
    split: str,
    session: str,
    state_id: str,
    policy_step: int | None,
    weight: float | None = None,
) -> ExportRow:
    """A session state's row (``state``: its ``text`` parsed): the one the export and the
    live pool both build."""
    return ExportRow(
        index=index,
        split=split,
        state_id=state_id,
        run=None,
        version=state_version(state),
        dataset=str(state.get("dataset", "")),
        prompt=prompt,
        state=text,
        reference_ops=NO_REFERENCE_JSON,
        source=SESSIONS,
        session=session,
        policy_step=policy_step,
        weight=weight,
    )


@dataclass
class ExportSet:
    """What an export wrote and what it left out; ``rows`` only where they were kept in memory.

    A streamed export counts its rows (``row_counts``) without keeping them.
    """

    options: ExportOptions
    rows: list[ExportRow] = field(default_factory=list)
    row_counts: dict[str, int] = field(default_factory=dict)  # split -> rows written
    collected: int = 0  # rows before the prompt-length limit left any out
    runs: dict[str, list[str]] = field(default_factory=dict)  # split -> runs
    duplicates: dict[str, str] = field(default_factory=dict)  # dropped -> kept state_id
    problems: list[str] = field(default_factory=list)
    prompt_lengths: dict[str, Any] | None = None
    with_sessions: bool = False  # session states were read: rows carry their source
    weighted: bool = False  # rows carry a weight
    sessions: dict[str, list[str]] = field(default_factory=dict)  # split -> sessions
    session_duplicates: int = 0
    duplicate_notes: list[str] = field(default_factory=list)  # the problems naming them
    extra: dict[str, Any] = field(default_factory=dict)  # sources, freshness, selection

    def split_rows(self, split: str) -> list[ExportRow]:
        return [r for r in self.rows if r.split == split]

    def add(self, row: ExportRow) -> None:
        """Count a row written (its run joins its split's runs on its first row)."""
        self.row_counts[row.split] = self.row_counts.get(row.split, 0) + 1
        if row.session is not None:
            names = self.sessions.setdefault(row.split, [])
            if not names or names[-1] != row.session:
                names.append(row.session)
            return
        runs = self.runs.setdefault(row.split, [])
        if not runs or runs[-1] != row.run:
            runs.append(row.run)

    @property
    def duplicates_dropped(self) -> int:
        """States left out as copies of others: run states and session states alike."""
        return len(self.duplicates) + self.session_duplicates

    @property
    def total(self) -> int:
        return sum(self.row_counts.values())

    def counts(self) -> dict[str, int]:
        return {s: self.row_counts.get(s, 0) for s in self.options.splits}

    def summary(self) -> dict[str, Any]:
        """What a manifest, the CLI and the asset's metadata report."""
        summary = {
            "rows": self.counts(),
            "runs": {s: self.runs.get(s, []) for s in self.options.splits},
            "duplicates_dropped": self.duplicates_dropped,
            "problems": self.problems,
            "options": self.options.model_dump(),
        }
        if self.with_sessions:  # absent from a run-only export: its manifest stays as it was
            summary["sessions"] = {s: self.sessions.get(s, []) for s in self.options.splits}
        summary.update(self.extra)
        if self.prompt_lengths is not None:
            summary["prompt_lengths"] = self.prompt_lengths
        return summary
