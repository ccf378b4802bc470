"""A session in the store: one Parquet part per sealed segment, built once per segment.

``session_states/<session>/<segment>.parquet`` holds every copy of every state with
its provenance (the state text on a segment's first copy only),
``session_prompts/<session>/<segment>.parquet`` one prompt per state the segment
brought, ``session_rejects/<session>/<segment>.jsonl`` its rejects, and
``session_states/<session>/.index.json`` the segments built and their counts, so a
session grown by one segment costs one segment's work. ``statepool ingest`` keeps the
lines it could not read in ``session_rejects/<session>/<writer>.ingest.jsonl`` (a name no
segment's can take); the session's totals count them too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import PromptInputError
from ..locations import AnyPath, as_path, is_local, read_fresh
from ..names import SESSION_PROMPTS, SESSION_REJECTS, SESSION_STATES, RejectSource
from ..prompts.render import build_curator_prompt
from ..prompts.spec import PromptSpec
from ..prompts.template import surrogate_problem
from ..rejects import Reject
from ..segments.reader import DEFAULT_MAX_LINE, Segment
from ..states.models import CheckpointState
from ..store.atomic import write_bytes_atomic
from ..store.layout import reject_line
from ..store.part_files import writer_options
from .layout import INDEX, check_session_name
from .read import SessionState, read_segment

INGEST_REJECTS = ".ingest.jsonl"  # ``<writer>.ingest.jsonl``: never ``<writer>-<seq>.jsonl``
_OLD_INGEST_REJECTS = ".ingest-"  # ``.ingest-<writer>.jsonl``, hidden, before they showed
_BATCH_CHARS = 32 << 20  # state text held before a row group is written

STATES_SCHEMA = pa.schema(
    [
        ("state_id", pa.string()),
        ("written_state_id", pa.string()),
        ("session", pa.string()),
        ("writer", pa.string()),
        ("segment", pa.string()),
        ("line", pa.int64()),
        ("policy_step", pa.int64()),
        ("parent_state_id", pa.string()),
        ("time", pa.float64()),
        ("meta", pa.string()),
        ("first_copy", pa.bool_()),
        ("state", pa.large_string()),
    ]
)
PROMPTS_SCHEMA = pa.schema(
    [
        ("state_id", pa.string()),
        ("session", pa.string()),
        ("segment", pa.string()),
        ("line", pa.int64()),
        ("policy_step", pa.int64()),
        ("prompt", pa.large_string()),
    ]
)


def _stem(segment: str) -> str:
    return segment.removesuffix(".jsonl")


class SessionFolders:
    """Where one session's parts live in the store."""

    def __init__(self, store_root: str | os.PathLike[str] | AnyPath, session: str):
        root = as_path(store_root)
        self.session = check_session_name(session)
        self.states = root / SESSION_STATES / session
        self.prompts = root / SESSION_PROMPTS / session
        self.rejects = root / SESSION_REJECTS / session

    def load_index(self, bad_as_empty: bool = False) -> dict[str, dict[str, Any]]:
        """The segments built so far, ``{}`` when none was (no index yet).

        An index that is there but cannot be read now raises its ``OSError``, never "none
        built": a reader keeps what it indexed and tries again. One that is not an index
        raises ``ValueError``, or with ``bad_as_empty`` counts as none built (a build then
        builds every segment again and writes a good one).
        """
        try:
            data = read_fresh(self.states / INDEX)
        except FileNotFoundError:
            return {}
        try:
            segments = json.loads(data).get("segments", {})
            if not isinstance(segments, dict):
                raise ValueError("its segments are not a mapping")
        except (ValueError, AttributeError) as exc:
            if bad_as_empty:
                return {}
            raise ValueError(f"{self.states / INDEX}: not a session index ({exc})") from None
        return segments

    def save_index(self, index: dict[str, dict[str, Any]]) -> None:
        data = json.dumps({"segments": index}, sort_keys=True, indent=0).encode("utf-8")
        write_bytes_atomic(self.states / INDEX, data)

    def ingest_rejects(self, writer: str) -> AnyPath:
        """Where ``statepool ingest`` as ``writer`` keeps the lines it could not read."""
        return self.rejects / f"{writer}{INGEST_REJECTS}"

    def ingest_reject_counts(self) -> dict[str, int]:
        """Lines in each of the session's ingest reject files (old hidden ones too)."""
        counts = {}
        for path in self._ingest_reject_files():
            with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
                counts[path.name] = sum(1 for line in f if line.strip())
        return counts

    def show_old_ingest_rejects(self) -> None:
        """Rename an old ingest's hidden ``.ingest-<writer>.jsonl`` to its visible name."""
        for path in self._ingest_reject_files():
            if not path.name.startswith(_OLD_INGEST_REJECTS):
                continue
            writer = path.name.removeprefix(_OLD_INGEST_REJECTS).removesuffix(".jsonl")
            target = self.ingest_rejects(writer)
            data = path.read_bytes()
            with contextlib.suppress(FileNotFoundError):
                data = target.read_bytes() + data
            write_bytes_atomic(target, data)
            path.unlink()

    def _ingest_reject_files(self) -> list[AnyPath]:
        try:
            names = sorted(p.name for p in self.rejects.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [
            self.rejects / n
            for n in names
            if n.endswith(INGEST_REJECTS)
            or (n.startswith(_OLD_INGEST_REJECTS) and n.endswith(".jsonl"))
        ]

    def drop(self, segment: str) -> None:
        stem = _stem(segment)
        for path in (
            self.states / f"{stem}.parquet",
            self.prompts / f"{stem}.parquet",
            self.rejects / f"{stem}.jsonl",
        ):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


# What Arrow raises for a value its column cannot hold (ArrowInvalid is a ValueError).
_UNSTORABLE = (pa.ArrowException, OverflowError, TypeError, ValueError, UnicodeError)


class _PartFile:
    """A Parquet part written in row groups to a hidden temp file, then put in place whole."""

    def __init__(self, target: AnyPath, schema: pa.Schema):
        self.target, self.schema = target, schema
        self.local = is_local(target)
        if self.local:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        else:
            fd, name = tempfile.mkstemp(prefix="statepool-session-", suffix=".parquet")
        os.close(fd)
        self.tmp = Path(name)
        # As the run parts are written: no dictionary or statistics of a text cell (each a
        # copy of it, of any size), pages compressed from the encoder's buffer.
        self.writer = pq.ParquetWriter(self.tmp, schema, **writer_options(schema))
        self.rows: list[dict[str, Any]] = []
        self.chars = 0
        self.unstorable: list[tuple[dict[str, Any], Exception]] = []  # rows left out, and why

    def add(self, row: dict[str, Any], chars: int = 0) -> None:
        self.rows.append(row)
        self.chars += chars
        if self.chars >= _BATCH_CHARS:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            try:
                table = pa.Table.from_pylist(self.rows, schema=self.schema)
            except _UNSTORABLE:  # one row spoilt the batch: each alone, the bad ones left out
                table = self._storable()
            self.writer.write_table(table)
        self.rows, self.chars = [], 0

    def _storable(self) -> pa.Table:
        good = []
        for row in self.rows:
            try:
                pa.Table.from_pylist([row], schema=self.schema)
            except _UNSTORABLE as exc:
                self.unstorable.append((row, exc))
                continue
            good.append(row)
        return pa.Table.from_pylist(good, schema=self.schema)

    def finish(self) -> None:
        self.flush()
        self.writer.close()
        try:
            if self.local:
                os.replace(self.tmp, self.target)
            else:
                with contextlib.suppress(FileExistsError):
                    self.target.parent.mkdir(parents=True, exist_ok=True)
                with self.tmp.open("rb") as src, self.target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        finally:
            self.tmp.unlink(missing_ok=True)


@dataclass
class SegmentReport:
    """What building one segment found."""

    states: int = 0
    unique: int = 0
    prompts: int = 0
    rejects: list[Reject] = field(default_factory=list)
    policy_steps: set[int] = field(default_factory=set)


def build_segment(
    folders: SessionFolders, segment: Segment, spec: PromptSpec, max_line: int = DEFAULT_MAX_LINE
) -> SegmentReport:
    """Read one sealed segment; write its states, prompts and rejects parts."""
    stem, session = _stem(segment.name), folders.session
    display = f"{session}/segments/{segment.name}"
    states = _PartFile(folders.states / f"{stem}.parquet", STATES_SCHEMA)
    prompts = _PartFile(folders.prompts / f"{stem}.parquet", PROMPTS_SCHEMA)
    report, seen = SegmentReport(), set()
    for item in read_segment(segment.path, display, max_line):
        if isinstance(item, Reject):
            report.rejects.append(item)
            continue
        first = item.state_id not in seen
        seen.add(item.state_id)
        report.states += 1
        if item.policy_step is not None:
            report.policy_steps.add(item.policy_step)
        prompt = _render(item, spec, display, report.rejects) if first else None
        item.state = None  # type: ignore[assignment]  # rendered: only its text is stored
        states.add(_state_row(item, session, segment, first), len(item.text) if first else 0)
        if first:
            report.unique += 1
            if prompt is not None:
                report.prompts += 1
                prompts.add(
                    {
                        "state_id": item.state_id,
                        "session": session,
                        "segment": segment.name,
                        "line": item.line,
                        "policy_step": item.policy_step,
                        "prompt": prompt,
                    },
                    len(prompt),
                )
    states.finish()
    prompts.finish()
    for part in (states, prompts):  # a line that cannot be stored is a reject, never a stop
        for row, exc in part.unstorable:
            if part is states:
                report.states -= 1
                report.unique -= bool(row["first_copy"])
            else:
                report.prompts -= 1
            error = f"{row['state_id']}: cannot be stored: {exc}"
            report.rejects.append(Reject(file=display, line=row["line"], error=error, raw=None))
    lines = [reject_line(r, RejectSource.SESSION_STATES) for r in report.rejects]
    if lines:
        write_bytes_atomic(folders.rejects / f"{stem}.jsonl", ("\n".join(lines) + "\n").encode())
    else:
        with contextlib.suppress(FileNotFoundError):
            (folders.rejects / f"{stem}.jsonl").unlink()
    return report


def _state_row(item: SessionState, session: str, segment: Segment, first: bool) -> dict[str, Any]:
    return {
        "state_id": item.state_id,
        "written_state_id": item.written_id,
        "session": session,
        "writer": segment.writer,
        "segment": segment.name,
        "line": item.line,
        "policy_step": item.policy_step,
        "parent_state_id": item.parent_state_id,
        "time": item.time,
        "meta": item.meta,
        "first_copy": first,
        "state": item.text if first else None,
    }


def session_prompt(state: CheckpointState, spec: PromptSpec) -> str:
    """A session state's prompt as ``session_prompts`` stores it; :class:`PromptInputError`
    when it cannot be rendered or stored."""
    prompt = build_curator_prompt(state, spec)
    unstorable = surrogate_problem(prompt)
    if unstorable:
        raise PromptInputError(f"cannot store the prompt: {unstorable}")
    return prompt


def _render(
    item: SessionState, spec: PromptSpec, display: str, rejects: list[Reject]
) -> str | None:
    try:
        return session_prompt(item.state, spec)
    except PromptInputError as exc:
        rejects.append(
            Reject(file=display, line=item.line, error=f"{item.state_id}: {exc}", raw=None)
        )
        return None
