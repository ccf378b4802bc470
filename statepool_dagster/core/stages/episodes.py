"""``run_episodes``: every usable line of episodes.jsonl, one part per episode batch.

A file that only grew is read from where the last build stopped and only the batches its
new lines belong to are written again; otherwise the whole file is parsed and only the
batches that changed are. Whether the bytes before that point are unchanged is told by
``runs.episodes.same_prefix``. A batch's rows are gathered by version and written once the
file moves past them.
"""

from __future__ import annotations

import contextlib
import zlib

from ..errors import BadRecordError
from ..names import EPISODES, EPISODES_FILE, RejectSource
from ..rejects import UNSTORABLE, Reject, storable
from ..runs.episodes import EpisodesRead, chunks, open_episodes, parse_episodes, same_prefix
from ..runs.opening import run_notes
from ..store.arrow_memory import release_if_large
from ..store.parts import RunTable
from ..store.pool import read_rejects, update_rejects
from ..store.preview import recent
from ..store.rows import episode_row
from .episode_batches import Batches
from .job import (
    TABLE_FORMAT,
    RunJob,
    StageReport,
    preview,
    reject_lines,
    round3,
)

PREVIEW = ["line", "version", "id", "task", "gt", "response", "correct"]
NOTES_LIMIT = 50  # notes about values kept whole but left out of a flat column


def _stored_lines(table: RunTable, seen: dict) -> int:
    """How many stored rows come from lines before the mark (a tail line read unfinished: 1)."""
    rows = sum(p.info["rows"] for p in table.parts.values())
    return rows - any(p.info["max_line"] > seen["lines"] for p in table.parts.values())


def _add_episodes(batches: Batches, read: EpisodesRead, display: str, strict: bool) -> list[Reject]:
    """Move ``read``'s episodes into ``batches`` as rows; the ones that cannot be stored back."""
    rejects = []
    episodes, read.episodes = read.episodes, []
    episodes.reverse()
    while episodes:  # each record let go once its row holds it
        episode = episodes.pop()
        row = episode_row(episode)
        if storable(row.record):
            batches.add(episode.version, row)
            continue
        reject = Reject(file=display, line=episode.line, error=UNSTORABLE, raw=None)
        if strict:
            raise BadRecordError(reject.describe())
        rejects.append(reject)
    return rejects


def build_episodes(job: RunJob) -> StageReport:
    """``run_episodes``: every usable line of episodes.jsonl; bad lines set aside."""
    fingerprint = job.fingerprint.digest  # before reading: never newer than the data
    display = f"{job.run}/{EPISODES_FILE}"
    strict = job.settings.strict
    table = job.table(EPISODES)
    f, unreadable = open_episodes(job.run_dir, display, strict)
    seen = table.marks.get("seen")
    with f if f is not None else contextlib.nullcontext():
        crc = None
        if f is not None and isinstance(seen, dict) and seen.get("format") == TABLE_FORMAT:
            crc = same_prefix(f, seen)
        grown = crc is not None
        if not grown and f is not None:
            f.seek(0)
        rejects: list[Reject] = []
        if grown:
            old = read_rejects(job.layout, job.run, RejectSource.EPISODES)
            rejects = [r for r in old if (r.line or 0) <= seen["lines"]]
            grown = _stored_lines(table, seen) + len(rejects) + seen["blank"] == seen["lines"]
            if not grown:  # parts lost or edited by hand: read the file again from the start
                rejects = []
                f.seek(0)
        if not grown:
            crc = 0
        marked, lines, blank = (seen["bytes"], seen["lines"], seen["blank"]) if grown else (0, 0, 0)
        batches = Batches(table, lines if grown else None)
        tail_blank = 0
        notes: list[str] = []
        for chunk, complete in chunks(f) if f is not None else ():
            read = parse_episodes(chunk, display, lines + 1, strict)
            if complete:  # a last line still being written is read, not marked
                marked += len(chunk)
                crc = zlib.crc32(chunk, crc)
                lines += read.lines
                blank += read.blank_lines
            else:
                tail_blank = read.blank_lines
            del chunk  # the records hold what they need: a long line is not kept twice
            notes.extend(read.notes[: NOTES_LIMIT - len(notes)])
            rejects += _add_episodes(batches, read, display, strict)
            rejects += read.rejects
            batches.end_chunk()
        if unreadable is None:  # a file that cannot be read now keeps what was stored
            batches.finish()
    rejects += [unreadable] if unreadable else []
    update_rejects(job.layout, job.run, RejectSource.EPISODES, rejects)
    mark = {
        "bytes": marked,
        "lines": lines,
        "blank": blank,
        "crc32": None if f is None else crc,
        "format": TABLE_FORMAT,
    }
    table.mark(seen=None if unreadable else mark, fingerprint=fingerprint)
    release_if_large()  # what the batches' writing freed, before the preview reads
    shown = preview(table, PREVIEW)
    table.save()
    report = _report(job, table, fingerprint, rejects, blank + tail_blank, len(batches.written))
    report.markdown["preview"] = shown
    report.notes += notes
    return report


def _report(
    job: RunJob,
    table: RunTable,
    fingerprint: str,
    rejects: list[Reject],
    blank_lines: int,
    written: int,
) -> StageReport:
    infos = sorted((p.info for p in table.parts.values()), key=lambda i: i["version"])
    total = sum(i["rows"] for i in infos)
    reused = len(infos) - written
    scored = [i for i in infos if i["scored"]]
    report = StageReport(
        job.run,
        fingerprint,
        total,
        values={
            "episodes": total,
            "rejects": len(rejects),
            "blank_lines": blank_lines,
            "batches": len(infos),
            "batches_written": written,
        },
        json={
            "versions": [i["version"] for i in recent(infos)],
            "accuracy_by_version": {
                str(i["version"]): round3(i["correct"] / i["scored"]) for i in recent(scored)
            },
        },
        notes=run_notes(job.run_dir),
        reused=reused,
    )
    if scored:
        flags = sum(i["scored"] for i in scored)
        report.values["accuracy"] = round(sum(i["correct"] for i in scored) / flags, 4)
    if rejects:
        report.markdown["reject_details"] = reject_lines(rejects)
    return report
