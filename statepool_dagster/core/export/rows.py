"""What an export holds: its options, run-level splits, one row per state, de-duplication keys."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..names import EXPORT_FORMATS

Format = Literal["verl", "trl", "pool"]  # the words of EXPORT_FORMATS, for type checkers


FORMATS: tuple[Format, ...] = EXPORT_FORMATS


SPLITS = ("train", "val", "test")


MANIFEST = ".statepool_export"  # hidden and not *.json: loaders glob *.json and skip dot files


ABILITY = "skill_curation"


NOT_RECORDED = {"next_version": None, "ops": [], "note": "not recorded: rematerialize the run"}


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

    @property
    def splits(self) -> list[str]:
        """The splits this export writes (val and test only when their fraction is above 0)."""
        wanted = {"train": True, "val": self.val_fraction > 0, "test": self.test_fraction > 0}
        return [s for s in SPLITS if wanted[s]]


def split_of(run: str, options: ExportOptions) -> str:
    """The run's split: a uniform draw from ``hash(seed, run)``, test first, then val."""
    digest = hashlib.blake2b(f"{options.seed}:{run}".encode(), digest_size=8).digest()
    draw = int.from_bytes(digest, "big") / 2**64
    if draw < options.test_fraction:
        return "test"
    if draw < options.test_fraction + options.val_fraction:
        return "val"
    return "train"


def state_digest(state: dict[str, Any]) -> bytes:
    """Identity of a state for de-duplication, 16 bytes: its library and its batch."""
    canonical = json.dumps(
        [state.get("lib_snapshot"), state.get("episodes")],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).digest()


def state_key(state: dict[str, Any]) -> str:
    """:func:`state_digest` as hex text."""
    return state_digest(state).hex()


@dataclass(frozen=True)
class ExportRow:
    """One state, ready for a trainer: its prompt, its state JSON and its reference ops."""

    index: int  # position within its split
    split: str
    state_id: str
    run: str
    version: int
    dataset: str
    prompt: str
    state: str
    reference_ops: str
    prompt_tokens: int | None = None  # set by export.lengths when a tokenizer counted it

    @property
    def ops(self) -> dict[str, Any]:
        return json.loads(self.reference_ops)

    def ground_truth(self) -> str:
        """The reference ops as the curator would answer them: a JSON list of operations."""
        return json.dumps(self.ops["ops"], ensure_ascii=False)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt}]


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

    def split_rows(self, split: str) -> list[ExportRow]:
        return [r for r in self.rows if r.split == split]

    def add(self, row: ExportRow) -> None:
        """Count a row written (its run joins its split's runs on its first row)."""
        self.row_counts[row.split] = self.row_counts.get(row.split, 0) + 1
        runs = self.runs.setdefault(row.split, [])
        if not runs or runs[-1] != row.run:
            runs.append(row.run)

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
            "duplicates_dropped": len(self.duplicates),
            "problems": self.problems,
            "options": self.options.model_dump(),
        }
        if self.prompt_lengths is not None:
            summary["prompt_lengths"] = self.prompt_lengths
        return summary
