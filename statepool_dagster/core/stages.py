"""One run's four build stages, Dagster-free: read inputs, write the store, report.

Each stage reads what it needs from the run folder or from the store files the
previous stage wrote, writes its own files atomically, and returns a
:class:`StageReport` (plain values, so it can come back from a worker process).
One partition at a time: memory is bounded by one run, never by the pool.
Unchanged inputs are reused from the stage's previous output instead of being
parsed or rendered again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import multiprocessing
import os
import signal
import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd
import pyarrow as pa
import tabulate  # noqa: F401  (pandas' to_markdown imports it lazily; import it before workers fork)

from .collect import run_notes
from .episodes import parse_episodes
from .errors import BadRecordError
from .join import PlannedState, build_state, plan_states
from .locations import AnyPath, as_path
from .models import CheckpointState
from .prompt_spec import PromptSpec
from .rejects import Reject
from .render import build_curator_prompt
from .run_files import EPISODES_FILE, SNAPSHOTS_DIR, file_stamp, fingerprint_run
from .run_names import check_run_name
from .settings import Settings
from .sidecars import SidecarsRead, read_sidecars
from .snapshots import list_snapshots, read_snapshot
from .store import (
    StoreLayout,
    libc_function,
    read_parquet,
    read_parquet_schema,
    read_rejects,
    update_rejects,
    write_parquet_atomic,
    write_state_pool,
)
from .tables import (
    EPISODE_COLUMNS,
    STATE_COLUMNS,
    SnapshotRow,
    StateRow,
    episodes_table,
    prompts_table,
    rejects_jsonl,
    snapshot_row,
    snapshots_frame,
    state_row,
    states_frame,
)

FINGERPRINT_META = b"statepool.source_fingerprint"
EPISODES_SEEN = b"statepool.episodes_seen"  # how much of episodes.jsonl the table holds
EPISODES, SNAPSHOTS, STATES, PROMPTS = (
    "run_episodes",
    "skill_snapshots",
    "checkpoint_states",
    "curator_prompts",
)


_PR_SET_PDEATHSIG = 1
RENDER_VERSION = "1"  # bump when render.py changes what a prompt looks like
STATE_VERSION = "1"  # bump when join.py or models.py change what a state looks like
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
SNAPSHOT_FIELDS = ("version", "file", "declared_version", "n_cards", "library", "file_stamp")


@dataclass
class StageReport:
    """What a stage did for one run: plain numbers, JSON values, Markdown, notes."""

    run: str
    fingerprint: str
    rows: int
    values: dict[str, int | float | str] = field(default_factory=dict)
    json: dict[str, Any] = field(default_factory=dict)
    markdown: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reused: int = 0


@dataclass(frozen=True)
class RunJob:
    """Everything a stage needs for one run."""

    settings: Settings
    run: str

    @property
    def layout(self) -> StoreLayout:
        return StoreLayout(self.settings.store_dir)

    @property
    def run_dir(self) -> AnyPath:
        return as_path(self.settings.runs_dir) / check_run_name(self.run)

    def table_path(self, asset: str) -> AnyPath:
        return self.layout.table(asset, self.run)

    def read_table(self, asset: str, columns: list[str] | None = None) -> pd.DataFrame:
        return read_parquet(self.table_path(asset), columns=columns).to_pandas()

    def columns(self, asset: str, names: list[str]) -> dict[str, list[Any]]:
        """Columns of an upstream table as lists (iterating pandas strings is slow)."""
        table = read_parquet(self.table_path(asset), columns=names)
        return {name: table.column(name).to_pylist() for name in names}

    def fingerprint_of(self, asset: str) -> str:
        """The source fingerprint an upstream table was built from (kept in its Parquet footer)."""
        meta = read_parquet_schema(self.table_path(asset)).metadata or {}
        return meta.get(FINGERPRINT_META, b"").decode()

    def previous(self, asset: str, columns: list[str]) -> pd.DataFrame | None:
        """This stage's last output for the run, if it has the columns reuse needs."""
        path = self.table_path(asset)
        if not path.exists():
            return None
        try:
            if not set(columns) <= set(read_parquet_schema(path).names):
                return None
            return read_parquet(path, columns=columns).to_pandas()
        except (OSError, pa.ArrowException):
            return None

    def write_table(
        self,
        asset: str,
        frame: pd.DataFrame,
        fingerprint: str,
        extra: dict[bytes, bytes] | None = None,
    ) -> None:
        table = _large_strings(pa.Table.from_pandas(frame, preserve_index=False))
        table = table.replace_schema_metadata(
            {
                **(table.schema.metadata or {}),
                FINGERPRINT_META: fingerprint.encode(),
                **(extra or {}),
            }
        )
        write_parquet_atomic(self.table_path(asset), table)


def _large_strings(table: pa.Table) -> pa.Table:
    """One schema whether rows were built or reused (pandas gives either string type)."""
    fields = [
        f.with_type(pa.large_string()) if pa.types.is_string(f.type) else f for f in table.schema
    ]
    return table.cast(pa.schema(fields, table.schema.metadata))


def _markdown_table(frame: pd.DataFrame, columns: list[str], rows: int = 10) -> str:
    return frame[columns].head(rows).to_markdown(index=False) if not frame.empty else "_no rows_"


def _reject_lines(rejects: list[Reject]) -> str:
    return "\n".join(f"- {r.describe()}" for r in rejects[:50])


def _digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def _read_episodes_file(job: RunJob) -> tuple[bytes, Reject | None]:
    """The bytes of the run's episodes.jsonl (none if absent), or the reject saying why not."""
    path = job.run_dir / EPISODES_FILE
    try:
        return (path.read_bytes() if path.exists() else b""), None
    except OSError as exc:
        error = f"unreadable: {exc.strerror or exc}"
        reject = Reject(file=f"{job.run}/{EPISODES_FILE}", line=None, error=error, raw=None)
        if job.settings.strict:
            raise BadRecordError(reject.describe()) from None
        return b"", reject


def _episodes_seen(job: RunJob, data: bytes) -> tuple[dict[str, Any], pd.DataFrame] | None:
    """What the last build read of a file that has only grown since: its mark and rows."""
    path = job.table_path(EPISODES)
    try:
        seen = json.loads((read_parquet_schema(path).metadata or {})[EPISODES_SEEN])
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None
    if seen["bytes"] > len(data) or _digest_bytes(data[: seen["bytes"]]) != seen["digest"]:
        return None  # rewritten, truncated or edited: read it all again
    previous = job.previous(EPISODES, list(EPISODE_COLUMNS))
    if previous is None:
        return None
    return seen, previous[previous["line"] <= seen["lines"]]


def _digest_bytes(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def build_episodes(job: RunJob) -> StageReport:
    """``run_episodes``: every usable line of episodes.jsonl; bad lines set aside.

    A file that only grew is read from where the last build stopped: the lines before
    are reused from the previous table (a digest of those bytes proves them unchanged).
    """
    fingerprint = fingerprint_run(job.run_dir).digest  # before reading: never newer than the data
    display = f"{job.run}/{EPISODES_FILE}"
    strict = job.settings.strict
    data, unreadable = _read_episodes_file(job)
    complete = data.rfind(b"\n") + 1  # a last line still being written is read, not marked
    seen = None if unreadable else _episodes_seen(job, data)
    if seen is None:
        start, lines, blank, kept, rejects = 0, 0, 0, None, []
    else:
        mark, kept = seen
        start, lines, blank = mark["bytes"], mark["lines"], mark["blank"]
        rejects = [
            r for r in read_rejects(job.layout, job.run, "episodes") if (r.line or 0) <= lines
        ]
    head = parse_episodes(data[start:complete], display, lines + 1, strict)
    tail = parse_episodes(data[complete:], display, lines + 1 + head.lines, strict)
    mark = {
        "bytes": complete,
        "lines": lines + head.lines,
        "blank": blank + head.blank_lines,
        "digest": _digest_bytes(data[:complete]),
    }
    rejects += head.rejects + tail.rejects + ([unreadable] if unreadable else [])
    update_rejects(job.layout, job.run, "episodes", rejects_jsonl(rejects, "episodes"))
    fresh = episodes_table(head.episodes + tail.episodes)
    frame = fresh if kept is None else pd.concat([kept, fresh], ignore_index=True)
    frame = frame.astype(fresh.dtypes.to_dict())
    extra = {} if unreadable else {EPISODES_SEEN: json.dumps(mark).encode()}
    job.write_table(EPISODES, frame, fingerprint, extra)
    scored = frame.dropna(subset=["correct"])
    accuracy = scored.groupby("version")["correct"].mean().round(3).to_dict()
    report = StageReport(
        job.run,
        fingerprint,
        len(frame),
        values={
            "episodes": len(frame),
            "rejects": len(rejects),
            "blank_lines": mark["blank"] + tail.blank_lines,
            "reused": len(kept) if kept is not None else 0,
        },
        json={
            "versions": sorted(int(v) for v in frame["version"].unique()),
            "accuracy_by_version": {str(k): float(v) for k, v in accuracy.items()},
        },
        markdown={
            "preview": _markdown_table(
                frame, ["line", "version", "id", "task", "gt", "response", "correct"]
            )
        },
        notes=run_notes(job.run_dir),
        reused=len(kept) if kept is not None else 0,
    )
    if len(scored):
        report.values["accuracy"] = round(float(scored["correct"].mean()), 4)
    if rejects:
        report.markdown["reject_details"] = _reject_lines(rejects)
    return report


def build_snapshots(job: RunJob) -> StageReport:
    """``skill_snapshots``: one row per snapshot, numeric order; unchanged files are not re-read."""
    fingerprint = fingerprint_run(job.run_dir).digest
    listing = list_snapshots(job.run_dir / SNAPSHOTS_DIR)
    previous = job.previous(SNAPSHOTS, list(SNAPSHOT_FIELDS))
    known: dict[tuple[str, str], SnapshotRow] = {}
    if previous is not None:
        for row in previous.itertuples(index=False):
            declared = None if pd.isna(row.declared_version) else int(row.declared_version)
            known[(row.file, row.file_stamp)] = (
                int(row.version),
                row.file,
                declared,
                int(row.n_cards),
                row.library,
                row.file_stamp,
            )
    rows: list[SnapshotRow] = []
    rejects: list[Reject] = []
    reused = 0
    for snapshot_file in listing.snapshots:
        display = f"{job.run}/{SNAPSHOTS_DIR}/{snapshot_file.path.name}"
        try:
            stamp = file_stamp(snapshot_file.path)
        except OSError:
            stamp = ""
        if stamp and (display, stamp) in known:
            rows.append(known[(display, stamp)])
            reused += 1
            continue
        read = read_snapshot(snapshot_file, display, strict=job.settings.strict)
        if isinstance(read, Reject):
            rejects.append(read)
        else:
            rows.append(snapshot_row(read, stamp))
    update_rejects(job.layout, job.run, "snapshots", rejects_jsonl(rejects, "snapshots"))
    frame = snapshots_frame(rows)
    job.write_table(SNAPSHOTS, frame, fingerprint)
    markdown = {
        "preview": _markdown_table(frame, ["version", "file", "declared_version", "n_cards"])
    }
    if rejects:
        markdown["reject_details"] = _reject_lines(rejects)
    return StageReport(
        job.run,
        fingerprint,
        len(frame),
        values={"snapshots": len(frame), "rejects": len(rejects), "reused": reused},
        json={
            "versions": [int(v) for v in frame["version"]],
            "cards_by_version": {
                str(int(v)): int(n) for v, n in zip(frame["version"], frame["n_cards"], strict=True)
            },
            "ignored_files": dict(listing.ignored),
        },
        markdown=markdown,
        notes=run_notes(job.run_dir),
        reused=reused,
    )


def _combined(*fingerprints: str) -> str:
    """One fingerprint if the inputs agree; otherwise a value no run's files can match."""
    unique = set(fingerprints)
    return unique.pop() if len(unique) == 1 else "mixed:" + "+".join(fingerprints)


def build_states(job: RunJob) -> StageReport:
    """``checkpoint_states``: the join, also written as the original's state_pool/ files.

    Each state is keyed by a digest of everything it is built from (its library, the
    next library, its batch, its sidecars, the settings); a key the previous build
    already has keeps that state, so a grown run only joins its new checkpoints.
    """
    settings = job.settings
    fingerprint = _combined(job.fingerprint_of(EPISODES), job.fingerprint_of(SNAPSHOTS))
    sidecars = read_sidecars(job.run_dir, job.run, strict=settings.strict)
    update_rejects(job.layout, job.run, "sidecars", rejects_jsonl(sidecars.rejects, "sidecars"))
    snapshots = job.columns(SNAPSHOTS, ["version", "library"])
    episodes = job.columns(EPISODES, ["version", "record"])
    library_texts = dict(zip(snapshots["version"], snapshots["library"], strict=True))
    batch_texts: dict[int, list[str]] = {}
    for version, record in zip(episodes["version"], episodes["record"], strict=True):
        batch_texts.setdefault(version, []).append(record)
    digests = _InputDigests(library_texts, batch_texts)
    planned, skipped = plan_states(
        list(library_texts), set(batch_texts), pairing=settings.pairing, followup=settings.followup
    )
    previous = job.previous(STATES, list(STATE_COLUMNS))
    known = {} if previous is None else {row[-1]: row for row in previous.itertuples(index=False)}
    settings_key = _digest(STATE_VERSION, job.run, settings.dataset, settings.pairing)
    libraries: dict[int, dict[str, Any]] = {}
    batches: dict[int, list[dict[str, Any]]] = {}
    rows: list[StateRow] = []
    for plan in planned:
        key = _state_key(settings_key, plan, digests, sidecars)
        old = known.get(key)
        if old is not None:
            rows.append(tuple(old))
            continue
        for v in (plan.library_version, plan.next_version):
            if v is not None and v not in libraries:
                libraries[v] = _decode(library_texts[v])
        for v in (plan.batch_version, plan.followup_version):
            if v is not None and v not in batches:
                batches[v] = [_decode(text) for text in batch_texts.get(v, [])]
        joined = build_state(
            job.run,
            plan,
            libraries,
            batches,
            settings.dataset,
            sidecars.analyses,
            sidecars.receipts,
        )
        rows.append(state_row(joined, key))
    frame = states_frame(rows)
    job.write_table(STATES, frame, fingerprint)
    write_state_pool(job.layout, job.run, zip(frame["state_id"], frame["state"], strict=True))
    reused = sum(row[-1] in known for row in rows)
    report = StageReport(
        job.run,
        fingerprint,
        len(frame),
        values={
            "states": len(frame),
            "reused": reused,
            "skipped_checkpoints": len(skipped),
            "pairing": settings.pairing,
            "followup": settings.followup,
            "analyses": len(sidecars.analyses),
            "receipts": len(sidecars.receipts),
            "sidecar_rejects": len(sidecars.rejects),
        },
        json={
            "skipped": {str(s.version): s.reason for s in skipped},
            "ignored_sidecars": dict(sidecars.ignored),
        },
        markdown={
            "preview": _markdown_table(
                frame, ["state_id", "version", "batch_version", "n_cards", "n_episodes"]
            )
        },
        reused=reused,
    )
    if sidecars.rejects:
        report.markdown["sidecar_reject_details"] = _reject_lines(sidecars.rejects)
    return report


class _InputDigests:
    """Each library's and batch's digest, computed once however many states share it."""

    def __init__(self, library_texts: dict[int, str], batch_texts: dict[int, list[str]]):
        self._libraries, self._batches = library_texts, batch_texts
        self._cache: dict[tuple[str, int | None], str] = {}

    def library(self, version: int | None) -> str:
        return self._get("library", version)

    def batch(self, version: int | None) -> str:
        return self._get("batch", version)

    def _get(self, kind: str, version: int | None) -> str:
        if (kind, version) not in self._cache:
            if kind == "library":
                parts = [] if version is None else [self._libraries[version]]
            else:
                parts = self._batches.get(version, []) if version is not None else []
            self._cache[(kind, version)] = _digest(str(len(parts)), *parts)
        return self._cache[(kind, version)]


def _state_key(
    settings_key: str, plan: PlannedState, digests: _InputDigests, sidecars: SidecarsRead
) -> str:
    """Digest of every input of one state, by the digests of the stored texts it is decoded from."""
    k = plan.version
    analysis = sidecars.analyses.get(k)
    return _digest(
        settings_key,
        repr(dataclasses.astuple(plan)),
        digests.library(plan.library_version),
        digests.library(plan.next_version),
        digests.batch(plan.batch_version),
        digests.batch(plan.followup_version),
        "" if analysis is None else _encode(analysis).decode("utf-8"),
        repr(sidecars.receipts.get(k)),
    )


def _formatter_identity(formatter: Callable[..., Any]) -> str:
    """Name plus the bytes of the file defining it: an edit anywhere in it renders again."""
    name = f"{getattr(formatter, '__module__', '')}.{getattr(formatter, '__qualname__', '')}"
    try:
        source = Path(inspect.getsourcefile(formatter) or "").read_bytes()
    except (OSError, TypeError):
        code = getattr(formatter, "__code__", None)
        source = repr((code.co_code, code.co_consts)).encode() if code else b""
    return f"{name}:{hashlib.blake2b(source, digest_size=16).hexdigest()}:{RENDER_VERSION}"


def _spec_digest(spec: PromptSpec) -> str:
    name = _formatter_identity(spec.episode_formatter)
    return _digest(
        spec.template,
        spec.param_rule,
        repr(sorted(spec.tool_specs.items())),
        name,
        spec.limits.model_dump_json(),
    )


def build_prompts(job: RunJob, spec: PromptSpec | None = None) -> StageReport:
    """``curator_prompts``: one prompt per state; unchanged states are not rendered again."""
    spec = spec or job.settings.prompt_spec()
    spec_key = _spec_digest(spec)
    fingerprint = job.fingerprint_of(STATES)
    states = job.columns(STATES, ["state_id", "version", "state", "reference_ops"])
    previous = job.previous(PROMPTS, ["state_id", "prompt", "input_key"])
    known = (
        {}
        if previous is None
        else dict(zip(previous["input_key"].tolist(), previous["prompt"].tolist(), strict=True))
    )
    keys = [_digest(spec_key, text) for text in states["state"]]
    prompts = [known.get(key) for key in keys]
    todo = [i for i, prompt in enumerate(prompts) if prompt is None]
    for i in todo:
        prompts[i] = build_curator_prompt(CheckpointState.from_json(states["state"][i]), spec)
    rows = zip(
        states["state_id"],
        [job.run] * len(keys),
        states["version"],
        prompts,
        states["reference_ops"],
        keys,
        strict=True,
    )
    frame = prompts_table(rows)
    job.write_table(PROMPTS, frame, fingerprint)
    lengths = frame["prompt_chars"].tolist()
    first = frame["prompt"].iloc[0] if lengths else None
    return StageReport(
        job.run,
        fingerprint,
        len(frame),
        values={
            "prompts": len(frame),
            "reused": len(frame) - len(todo),
            "prompt_chars_min": min(lengths, default=0),
            "prompt_chars_median": float(statistics.median(lengths)) if lengths else 0.0,
            "prompt_chars_max": max(lengths, default=0),
        },
        markdown={"first_prompt": f"```\n{first}\n```" if first else "_no prompts_"},
        reused=len(frame) - len(todo),
    )


STAGES = {
    EPISODES: build_episodes,
    SNAPSHOTS: build_snapshots,
    STATES: build_states,
    PROMPTS: build_prompts,
}


def run_stage(
    stage: Callable[[RunJob], StageReport], jobs: list[RunJob], workers: int = 0
) -> list[StageReport]:
    """Run ``stage`` for every job, on up to ``workers`` processes (0: one per core)."""
    workers = min(workers or os.cpu_count() or 1, len(jobs))
    tasks = [(stage, job) for job in jobs]
    if workers <= 1:
        return [_locked(task) for task in tasks]
    # fork: workers inherit the loaded code, so starting them costs milliseconds.
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_die_with_parent, initargs=(os.getpid(),)
    ) as pool:
        return list(pool.map(_locked, tasks))


def _locked(task: tuple[Callable[[RunJob], StageReport], RunJob]) -> StageReport:
    """One stage of one run under the run's store lock: two writers never interleave."""
    stage, job = task
    with job.layout.lock(job.run):
        return stage(job)


def _die_with_parent(parent: int) -> None:
    """A worker must not outlive a killed parent: it would hold the parent's store locks."""
    prctl = libc_function("prctl")
    if prctl is not None:  # elsewhere the check below still catches a parent already gone
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def build_run(settings: Settings, run: str) -> list[StageReport]:
    """All four stages for one run, in order (the core path, without Dagster)."""
    job = RunJob(settings, run)
    return [stage(job) for stage in STAGES.values()]
