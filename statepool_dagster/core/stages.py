"""One run's four build stages, Dagster-free: read inputs, write the store, report.

Each stage reads what it needs from the run folder or from the store files the
previous stage wrote, writes its own files atomically, and returns a
:class:`StageReport` (plain values, so it can come back from a worker process).
One partition at a time: memory is bounded by one run, never by the pool.
Unchanged inputs are reused from the stage's previous output instead of being
parsed or rendered again.
"""

from __future__ import annotations

import hashlib
import inspect
import multiprocessing
import os
import signal
import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from .collect import read_run_episodes, run_notes
from .episodes import EpisodesRead
from .join import join_states
from .locations import AnyPath, as_path
from .prompt_spec import PromptSpec
from .rejects import Reject
from .render import build_curator_prompt
from .run_files import SNAPSHOTS_DIR, file_stamp, fingerprint_run
from .run_names import check_run_name
from .settings import Settings
from .sidecars import read_sidecars
from .snapshots import list_snapshots, read_snapshot
from .store import (
    StoreLayout,
    libc_function,
    read_parquet,
    read_parquet_schema,
    update_rejects,
    write_parquet_atomic,
    write_state_pool,
)
from .tables import (
    SnapshotRow,
    batches_from_table,
    episodes_table,
    prompts_table,
    rejects_jsonl,
    snapshot_row,
    snapshots_frame,
    snapshots_from_table,
    states_from_table,
    states_table,
)

FINGERPRINT_META = b"statepool.source_fingerprint"
EPISODES, SNAPSHOTS, STATES, PROMPTS = (
    "run_episodes",
    "skill_snapshots",
    "checkpoint_states",
    "curator_prompts",
)


_PR_SET_PDEATHSIG = 1
RENDER_VERSION = "1"  # bump when render.py changes what a prompt looks like
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

    def write_table(self, asset: str, frame: pd.DataFrame, fingerprint: str) -> None:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), FINGERPRINT_META: fingerprint.encode()}
        )
        write_parquet_atomic(self.table_path(asset), table)


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


def build_episodes(job: RunJob) -> StageReport:
    """``run_episodes``: every usable line of episodes.jsonl; bad lines set aside."""
    fingerprint = fingerprint_run(job.run_dir).digest  # before reading: never newer than the data
    read: EpisodesRead = read_run_episodes(job.run_dir, job.run, strict=job.settings.strict)
    update_rejects(job.layout, job.run, "episodes", rejects_jsonl(read.rejects, "episodes"))
    frame = episodes_table(read.episodes)
    job.write_table(EPISODES, frame, fingerprint)
    scored = frame.dropna(subset=["correct"])
    accuracy = scored.groupby("version")["correct"].mean().round(3).to_dict()
    report = StageReport(
        job.run,
        fingerprint,
        len(frame),
        values={
            "episodes": len(frame),
            "rejects": len(read.rejects),
            "blank_lines": read.blank_lines,
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
    )
    if len(scored):
        report.values["accuracy"] = round(float(scored["correct"].mean()), 4)
    if read.rejects:
        report.markdown["reject_details"] = _reject_lines(read.rejects)
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
    """``checkpoint_states``: the join, also written as the original's state_pool/ files."""
    settings = job.settings
    fingerprint = _combined(job.fingerprint_of(EPISODES), job.fingerprint_of(SNAPSHOTS))
    sidecars = read_sidecars(job.run_dir, job.run, strict=settings.strict)
    update_rejects(job.layout, job.run, "sidecars", rejects_jsonl(sidecars.rejects, "sidecars"))
    joined, skipped = join_states(
        job.run,
        snapshots_from_table(job.read_table(SNAPSHOTS)),
        batches_from_table(job.read_table(EPISODES)),
        settings.dataset,
        pairing=settings.pairing,
        followup=settings.followup,
        analyses=sidecars.analyses,
        receipts=sidecars.receipts,
    )
    frame = states_table(joined)
    job.write_table(STATES, frame, fingerprint)
    write_state_pool(job.layout, job.run, zip(frame["state_id"], frame["state"], strict=True))
    report = StageReport(
        job.run,
        fingerprint,
        len(frame),
        values={
            "states": len(frame),
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
    )
    if sidecars.rejects:
        report.markdown["sidecar_reject_details"] = _reject_lines(sidecars.rejects)
    return report


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
    states = job.read_table(STATES, ["state_id", "version", "state", "reference_ops"])
    previous = job.previous(PROMPTS, ["state_id", "prompt", "input_key"])
    known = (
        {}
        if previous is None
        else dict(zip(previous["input_key"], previous["prompt"], strict=True))
    )
    keys = [_digest(spec_key, text) for text in states["state"]]
    todo = [i for i, key in enumerate(keys) if key not in known]
    rendered = dict(
        zip(
            todo,
            (build_curator_prompt(s, spec) for s in states_from_table(states.iloc[todo])),
            strict=True,
        )
    )
    rows = [
        (sid, job.run, int(version), known[key] if i not in rendered else rendered[i], ops, key)
        for i, (sid, version, ops, key) in enumerate(
            zip(states["state_id"], states["version"], states["reference_ops"], keys, strict=True)
        )
    ]
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
