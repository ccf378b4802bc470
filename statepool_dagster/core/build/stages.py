"""One run's four build stages, Dagster-free: read inputs, write the store, report.

Each stage reads what it needs from the run folder or from the store files the
previous stage wrote, writes its own files atomically, and returns a
:class:`StageReport` (plain values, so it can come back from a worker process).
One partition at a time: memory is bounded by one run, never by the pool.
Unchanged inputs are reused from the stage's previous output instead of being
parsed or rendered again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import inspect
import json
import multiprocessing
import os
import signal
import statistics
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..runs.read import run_notes
from ..runs.episodes import parse_episodes
from ..errors import BadRecordError
from ..states.join import PlannedState, plan_states, state_fields
from ..locations import AnyPath, as_path
from ..states.models import CheckpointState, dumps, state_json
from ..prompts.spec import PromptSpec
from ..states.reference_ops import ops_json, reference_ops
from ..rejects import Reject
from ..prompts.render import build_curator_prompt
from ..runs.files import EPISODES_FILE, SNAPSHOTS_DIR, file_stamp, fingerprint_run
from ..runs.names import check_run_name
from ..config import Settings
from ..runs.sidecars import SidecarsRead, read_sidecars
from ..runs.snapshots import list_snapshots, read_snapshot
from ..store.files import (
    StoreLayout,
    libc_function,
    read_parquet,
    read_parquet_schema,
    read_rejects,
    update_rejects,
    write_parquet_atomic,
    write_state_pool,
)
from ..store.tables import (
    EPISODE_COLUMNS,
    SNAPSHOT_COLUMNS,
    STATE_COLUMNS,
    SnapshotRow,
    StateRow,
    episode_row,
    episodes_table,
    load_arrow,
    markdown_preview,
    prompts_table,
    rejects_jsonl,
    snapshot_row,
    snapshots_table,
    states_table,
)

FINGERPRINT_META = b"statepool.source_fingerprint"
EPISODES_SEEN = b"statepool.episodes_seen"  # how much of episodes.jsonl the table holds
RENDERED_FROM = b"statepool.rendered_from"  # the states a prompts table was rendered from
# What the tables' JSON columns hold. 2: ``record`` and ``library`` in the state files' own
# JSON form (``models.dumps``), which build_states joins into state texts as they are.
# Older tables of those two assets are never reused, and their texts are re-encoded on read.
TABLE_FORMAT_META, TABLE_FORMAT = b"statepool.table_format", b"2"
EPISODES, SNAPSHOTS, STATES, PROMPTS = (
    "run_episodes",
    "skill_snapshots",
    "checkpoint_states",
    "curator_prompts",
)
JSON_COLUMNS = {EPISODES: "record", SNAPSHOTS: "library"}  # the texts states are joined from


_PR_SET_PDEATHSIG = 1
RENDER_VERSION = "1"  # bump when render.py changes what a prompt looks like
STATE_VERSION = "1"  # bump when join.py or models.py change what a state looks like
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


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

    def columns(self, asset: str, names: list[str]) -> dict[str, list[Any]]:
        """Columns of an upstream table as lists; JSON text of an older format is re-encoded."""
        table = read_parquet(self.table_path(asset), columns=names)
        values = {name: table.column(name).to_pylist() for name in names}
        text = JSON_COLUMNS.get(asset)
        if text in values and not _current_format(table.schema):
            values[text] = [dumps(_decode(t)) for t in values[text]]
        return values

    def fingerprint_of(self, asset: str) -> str:
        """The source fingerprint an upstream table was built from (kept in its Parquet footer)."""
        meta = read_parquet_schema(self.table_path(asset)).metadata or {}
        return meta.get(FINGERPRINT_META, b"").decode()

    def previous(self, asset: str, columns: list[str]) -> pa.Table | None:
        """This stage's last output for the run, if it has the columns reuse needs."""
        path = self.table_path(asset)
        if not path.exists():
            return None
        try:
            schema = read_parquet_schema(path)
            if asset in JSON_COLUMNS and not _current_format(schema):
                return None
            if not set(columns) <= set(schema.names):
                return None
            return read_parquet(path, columns=columns)
        except (OSError, pa.ArrowException):
            return None

    def write_table(
        self,
        asset: str,
        table: pa.Table,
        fingerprint: str,
        extra: dict[bytes, bytes] | None = None,
    ) -> None:
        table = table.replace_schema_metadata(
            {
                **(table.schema.metadata or {}),
                FINGERPRINT_META: fingerprint.encode(),
                TABLE_FORMAT_META: TABLE_FORMAT,
                **(extra or {}),
            }
        )
        write_parquet_atomic(self.table_path(asset), table)


def states_digest(input_keys: list[str]) -> str:
    """One digest of a states table's rows: what its prompts table records it rendered."""
    return _digest(*input_keys)


def _round3(x: float) -> float:
    """Three decimals as numpy rounds them (``x * 1000`` to even), as the UI always showed."""
    return round(x * 1000) / 1000


def _current_format(schema: pa.Schema) -> bool:
    return (schema.metadata or {}).get(TABLE_FORMAT_META) == TABLE_FORMAT


def _rows(table: pa.Table) -> list[tuple]:
    """A stored table's rows as tuples, in its column order."""
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))


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


def _episodes_seen(job: RunJob, data: bytes) -> tuple[dict[str, Any], pa.Table] | None:
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
    return seen, previous.filter(pc.less_equal(previous["line"], seen["lines"]))


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
    fresh = episodes_table([episode_row(e) for e in head.episodes + tail.episodes])
    table = fresh if kept is None else pa.concat_tables([kept, fresh])
    extra = {} if unreadable else {EPISODES_SEEN: json.dumps(mark).encode()}
    job.write_table(EPISODES, table, fingerprint, extra)
    versions = table["version"].to_pylist()
    scored: dict[int, list[bool]] = {}
    for version, correct in zip(versions, table["correct"].to_pylist(), strict=True):
        if correct is not None:
            scored.setdefault(version, []).append(correct)
    report = StageReport(
        job.run,
        fingerprint,
        table.num_rows,
        values={
            "episodes": table.num_rows,
            "rejects": len(rejects),
            "blank_lines": mark["blank"] + tail.blank_lines,
            "reused": len(kept) if kept is not None else 0,
        },
        json={
            "versions": sorted(set(versions)),
            "accuracy_by_version": {
                str(v): _round3(sum(c) / len(c)) for v, c in sorted(scored.items())
            },
        },
        markdown={
            "preview": markdown_preview(
                table, ["line", "version", "id", "task", "gt", "response", "correct"]
            )
        },
        notes=run_notes(job.run_dir),
        reused=len(kept) if kept is not None else 0,
    )
    if scored:
        flags = [c for cs in scored.values() for c in cs]
        report.values["accuracy"] = round(sum(flags) / len(flags), 4)
    if rejects:
        report.markdown["reject_details"] = _reject_lines(rejects)
    return report


def build_snapshots(job: RunJob) -> StageReport:
    """``skill_snapshots``: one row per snapshot, numeric order; unchanged files are not re-read."""
    fingerprint = fingerprint_run(job.run_dir).digest
    listing = list_snapshots(job.run_dir / SNAPSHOTS_DIR)
    previous = job.previous(SNAPSHOTS, list(SNAPSHOT_COLUMNS))
    known: dict[tuple[str, str], SnapshotRow] = {}
    if previous is not None:
        for row in _rows(previous):
            known[(row[1], row[5])] = row
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
    table = snapshots_table(rows)
    job.write_table(SNAPSHOTS, table, fingerprint)
    markdown = {
        "preview": markdown_preview(table, ["version", "file", "declared_version", "n_cards"])
    }
    if rejects:
        markdown["reject_details"] = _reject_lines(rejects)
    return StageReport(
        job.run,
        fingerprint,
        len(rows),
        values={"snapshots": len(rows), "rejects": len(rejects), "reused": reused},
        json={
            "versions": [row[0] for row in rows],
            "cards_by_version": {str(row[0]): row[3] for row in rows},
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
    snapshots = job.columns(SNAPSHOTS, ["version", "library", "n_cards"])
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
    known = {} if previous is None else {row[-1]: row for row in _rows(previous)}
    settings_key = _digest(STATE_VERSION, job.run, settings.dataset, settings.pairing)
    n_cards = dict(zip(snapshots["version"], snapshots["n_cards"], strict=True))
    libraries: dict[int, dict[str, Any]] = {}  # decoded only for the reference ops
    rows: list[StateRow] = []
    for plan in planned:
        key = _state_key(settings_key, plan, digests, sidecars)
        old = known.get(key)
        if old is not None:
            rows.append(old)
            continue
        followup = []
        if plan.followup_version is not None:
            followup = [_decode(text) for text in batch_texts.get(plan.followup_version, [])]
        fields = state_fields(job.run, plan, followup, sidecars.analyses, sidecars.receipts)
        batch = batch_texts[plan.batch_version]
        text = state_json(
            fields.state_id,
            settings.dataset,
            library_texts[plan.library_version],
            batch,
            fields.analysis,
            fields.last_receipt,
            fields.followup_qids,
            fields.gt_map,
        )
        for v in (plan.library_version, plan.next_version):
            if v is not None and v not in libraries:
                libraries[v] = _decode(library_texts[v])
        nxt = plan.next_version
        ops = reference_ops(
            libraries[plan.library_version], nxt, None if nxt is None else libraries[nxt]
        )
        rows.append(
            (
                fields.state_id,
                job.run,
                plan.version,
                plan.library_version,
                plan.batch_version,
                n_cards[plan.library_version],
                len(batch),
                text,
                ops_json(ops),
                key,
            )
        )
    table = states_table(rows)
    job.write_table(STATES, table, fingerprint)
    write_state_pool(job.layout, job.run, ((row[0], row[7]) for row in rows))
    reused = sum(row[-1] in known for row in rows)
    report = StageReport(
        job.run,
        fingerprint,
        len(rows),
        values={
            "states": len(rows),
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
            "preview": markdown_preview(
                table, ["state_id", "version", "batch_version", "n_cards", "n_episodes"]
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
    states = job.columns(STATES, ["state_id", "version", "state", "reference_ops", "input_key"])
    previous = job.previous(PROMPTS, ["state_id", "prompt", "input_key"])
    known = (
        {}
        if previous is None
        else dict(
            zip(previous["input_key"].to_pylist(), previous["prompt"].to_pylist(), strict=True)
        )
    )
    keys = [_digest(spec_key, text) for text in states["state"]]
    prompts = [known.get(key) for key in keys]
    todo = [i for i, prompt in enumerate(prompts) if prompt is None]
    for i in todo:
        prompts[i] = build_curator_prompt(CheckpointState.trusted(states["state"][i]), spec)
    rows = zip(
        states["state_id"],
        [job.run] * len(keys),
        states["version"],
        prompts,
        states["reference_ops"],
        keys,
        strict=True,
    )
    rendered_from = {RENDERED_FROM: states_digest(states["input_key"]).encode()}
    job.write_table(PROMPTS, prompts_table(rows), fingerprint, rendered_from)
    lengths = [len(prompt) for prompt in prompts]
    first = prompts[0] if prompts else None
    return StageReport(
        job.run,
        fingerprint,
        len(prompts),
        values={
            "prompts": len(prompts),
            "reused": len(prompts) - len(todo),
            "prompt_chars_min": min(lengths, default=0),
            "prompt_chars_median": float(statistics.median(lengths)) if lengths else 0.0,
            "prompt_chars_max": max(lengths, default=0),
        },
        markdown={"first_prompt": f"```\n{first}\n```" if first else "_no prompts_"},
        reused=len(prompts) - len(todo),
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
    load_arrow()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(os.getpid(),)
    ) as pool:
        return list(pool.map(_locked, tasks))


def _locked(task: tuple[Callable[[RunJob], StageReport], RunJob]) -> StageReport:
    """One stage of one run under the run's store lock: two writers never interleave."""
    stage, job = task
    with job.layout.lock(job.run), without_cyclic_gc():
        return stage(job)


@contextlib.contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """Pause Python's cycle collector while a stage allocates its (acyclic) records.

    In a process that has Dagster loaded, each full collection walks hundreds of
    thousands of objects; a stage's allocations set off several. Reference counting
    still frees everything a stage drops; any cycle waits for the next collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _start_worker(parent: int) -> None:
    """Set up a forked worker: die with the parent, and leave the inherited heap alone.

    ``gc.freeze`` keeps the collector from walking (and so copying, page by page) the
    objects the worker inherited. A worker must not outlive a killed parent: it would
    hold the parent's store locks.
    """
    gc.freeze()
    prctl = libc_function("prctl")
    if prctl is not None:  # elsewhere the check below still catches a parent already gone
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def build_run(settings: Settings, run: str) -> list[StageReport]:
    """All four stages for one run, in order (the core path, without Dagster)."""
    job = RunJob(settings, run)
    with without_cyclic_gc():
        return [stage(job) for stage in STAGES.values()]
