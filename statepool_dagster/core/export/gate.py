"""The last steps of every exported row, whatever its source: selection, length, position
(:class:`Gate`, at the end).

verl drops prompts longer than ``max_prompt_length`` when its dataset loads
(``filter_overlong_prompts``), silently from the export's point of view. Counting here,
with the trainer's own tokenizer (a local folder or ``tokenizer.json``; nothing is
downloaded), leaves those states out of the export and names them instead. A
tokenizer folder with a chat template is counted as verl counts it (the template applied,
the generation prompt added); without a tokenizer the length is an estimate from
characters, labelled so.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StatepoolError
from ..feedback.select import Selection
from .rows import ExportRow, ExportSet

CHARS_PER_TOKEN = 4
Messages = list[dict[str, Any]]


@dataclass(frozen=True)
class PromptCounter:
    """Counts a prompt's tokens; ``method`` says how (shown in the export's summary).

    ``count`` gets each message's content as a ``str``; with ``texts``, as the export holds
    it, which may be a text left in Arrow (``store.cells.TextCell``: ``len`` as a ``str``'s).
    """

    method: str
    count: Callable[[Messages], int]
    exact: bool
    texts: bool = False


def char_estimate() -> PromptCounter:
    def count(messages: Messages) -> int:
        return math.ceil(sum(len(m.get("content") or "") for m in messages) / CHARS_PER_TOKEN)

    method = f"estimate: characters / {CHARS_PER_TOKEN}, no tokenizer"
    return PromptCounter(method, count, False, texts=True)


def _token_ids(encoded: Any) -> list[int]:
    """``apply_chat_template``'s ids, whether it returned a list or an encoding."""
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    if encoded and isinstance(encoded[0], list):
        encoded = encoded[0]
    return list(encoded)


def _raw_tokenizer(file: Path) -> PromptCounter:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise StatepoolError(
            f"tokenizer {file}: reading it needs the tokenizers package "
            "(pip install 'statepool_dagster[trainer]')"
        ) from None
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers' Rust errors are raised as Exception itself
        raise StatepoolError(f"tokenizer {file}: cannot be read: {exc}") from None

    def count(messages: Messages) -> int:
        return sum(
            len(tokenizer.encode(m.get("content") or "", add_special_tokens=False).ids)
            for m in messages
        )

    return PromptCounter(f"tokenizer {file} (message texts, no chat template)", count, True)


def _pretrained(folder: Path) -> PromptCounter:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise StatepoolError(f"tokenizer {folder}: cannot be loaded: {exc}") from None
    if not getattr(tokenizer, "chat_template", None):

        def count(messages: Messages) -> int:
            return sum(
                len(tokenizer.encode(m.get("content") or "", add_special_tokens=False))
                for m in messages
            )

        return PromptCounter(f"tokenizer {folder} (message texts, no chat template)", count, True)

    def templated(messages: Messages) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return len(_token_ids(ids))

    return PromptCounter(f"tokenizer {folder} (chat template)", templated, True)


def load_counter(path: str | None) -> PromptCounter:
    """The counter for ``--tokenizer``: a folder, a ``tokenizer.json``, or ``None``."""
    if path is None:
        return char_estimate()
    target = Path(path).expanduser()
    if target.is_file():
        return _raw_tokenizer(target)
    if not target.is_dir():
        raise StatepoolError(f"tokenizer {target}: no such file or folder (nothing is downloaded)")
    try:
        import transformers  # noqa: F401
    except ImportError:
        if (target / "tokenizer.json").is_file():
            return _raw_tokenizer(target / "tokenizer.json")
        raise StatepoolError(
            f"tokenizer {target}: a folder without tokenizer.json needs transformers "
            "(pip install 'statepool_dagster[trainer]')"
        ) from None
    return _pretrained(target)


class LengthFilter:
    """Measures each row's prompt as the export streams: gives it ``prompt_tokens`` and
    leaves out (naming it) a row over ``max_tokens``. Keeps one integer per row measured,
    for the longest and the median."""

    def __init__(self, counter: PromptCounter, max_tokens: int | None):
        self.counter = counter
        self.max_tokens = max_tokens
        self.lengths = array("q")
        self.over: list[str] = []
        self.problems: list[str] = []

    def measure(self, row: ExportRow) -> ExportRow | None:
        """The row with its length, or ``None`` when it is over the limit."""
        tokens = self.counter.count((row if self.counter.texts else row.in_python()).messages())
        self.lengths.append(tokens)
        if self.max_tokens is not None and tokens > self.max_tokens:
            self.over.append(row.state_id)
            self.problems.append(
                f"{row.run or f'session {row.session}'}: state {row.state_id} left out: "
                f"prompt of {tokens} tokens "
                f"over --max-prompt-tokens {self.max_tokens} ({self.counter.method})"
            )
            return None
        return dataclasses.replace(row, prompt_tokens=tokens if self.counter.exact else None)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.lengths)
        return {
            "method": self.counter.method,
            "max_prompt_tokens": self.max_tokens,
            "longest": ordered[-1] if ordered else None,
            "median": ordered[len(ordered) // 2] if ordered else None,
            "left_out": self.over,
        }


class Gate:
    """Leaves out what the selection or the length limit rejects; numbers and counts the rest.

    Each state left out by the selection is named, with its reason, in the problems.
    """

    def __init__(
        self,
        export: ExportSet,
        lengths: LengthFilter | None,
        selection: Selection | None,
        only: frozenset[str] | None = None,
    ):
        self.export, self.lengths, self.only = export, lengths, only
        self.selection = selection if selection is not None and selection.options.active else None
        self.index: dict[str, int] = {}
        self.not_in_only = 0

    def admit(self, row: ExportRow) -> ExportRow | None:
        """``row`` as written (weighed, measured), or ``None`` when it is left out."""
        if self.only is not None and row.state_id not in self.only:
            self.not_in_only += 1
            return None
        if self.selection is not None:
            decision = self.selection.decide(row.state_id)
            if not decision.keep:
                self.export.problems.append(f"state {row.state_id} left out: {decision.reason}")
                return None
            if decision.weight is not None:
                row = dataclasses.replace(row, weight=decision.weight)
        if self.lengths is not None:
            measured = self.lengths.measure(row)
            if measured is None:
                return None
            row = measured
        self.index[row.split] = row.index + 1
        self.export.add(row)
        return row

    def finish(self) -> None:
        if self.not_in_only:
            self.export.problems.append(
                f"{self.not_in_only} states not in the pool version asked for left out"
            )
        if self.lengths is not None:
            self.export.problems.extend(self.lengths.problems)
            self.export.prompt_lengths = self.lengths.summary()
