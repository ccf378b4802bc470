"""``run_episodes``: every usable line of episodes.jsonl, one part per episode batch.

A file that only grew is read from where the last build stopped and only the batches its
new lines belong to are written again; otherwise the whole file is parsed and only the
batches that changed are. Whether the bytes before that point are unchanged is told by a
CRC-32 of all of them, read again on each growth (about 2 ms per 6 MB of episodes, reading
included, against 4 ms with SHA-256; one of the few costs of absorbing a checkpoint that
grow with the run, docs/performance.md).
Every byte is compared, never a sample: an edit of up to four bytes in a row is always
seen, and any other edit, even one that keeps every byte count, but for a chance of one
in 2**32 (CRC-32 is a checksum, not a cryptographic digest: it tells edits, not forgeries).
A mark of an older build (a SHA-256 of the same bytes) is still checked, once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import BadRecordError
from ..locations import is_local
from ..names import EPISODES, EPISODES_FILE, RejectSource
from ..rejects import UNSTORABLE, Reject, storable
from ..runs.episodes import EpisodesRead, parse_episodes
from ..runs.opening import open_run_file, present, run_notes
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


CHUNK = 1 << 18  # bytes read at a time; a batch is written before the next one is read


def _open(job: RunJob) -> tuple[BinaryIO | None, Reject | None]:
    """The run's episodes.jsonl opened for reading (none if absent), or the reject saying why."""
    path = job.run_dir / EPISODES_FILE
    if not present(path):
        return None, None
    try:
        if not is_local(path):
            return path.open("rb"), None
        return os.fdopen(open_run_file(path, job.run_dir), "rb"), None
    except OSError as exc:  # a FIFO, a loop, a link out of the run: refused, never opened
        error = f"unreadable: {exc.strerror or exc}"
        reject = Reject(file=f"{job.run}/{EPISODES_FILE}", line=None, error=error, raw=None)
        if job.settings.strict:
            raise BadRecordError(reject.describe()) from None
        return None, reject


DIGEST_READ = 1 << 20


def _prefix_crc(f: BinaryIO, size: int, sha256: bool = False) -> tuple[int, str] | None:
    """The CRC-32 of the file's first ``size`` bytes (the file left after them), and their
    SHA-256 if asked (an older build's mark); ``None`` if the file is shorter.

    Read into one buffer, reused: a new block per read costs its pages' first touch each
    time, a fifth of the checksum's own time.
    """
    f.seek(0)
    crc, h = 0, hashlib.sha256() if sha256 else None
    left = size
    view = memoryview(bytearray(min(DIGEST_READ, size)))
    while left > 0 and (n := f.readinto(view[: min(len(view), left)])):
        crc = zlib.crc32(view[:n], crc)
        if h is not None:
            h.update(view[:n])
        left -= n
    return None if left else (crc, "" if h is None else h.hexdigest())


def _same_prefix(f: BinaryIO, seen: dict) -> int | None:
    """The CRC-32 of the bytes the last build read, if the file still starts with them."""
    size, crc, sha = seen.get("bytes"), seen.get("crc32"), seen.get("digest")
    counts = (size, seen.get("lines"), seen.get("blank"))
    if any(type(n) is not int or n < 0 for n in counts):
        return None  # a mark this code did not write (a hand edit): the run is read again
    if type(crc) is int:
        found = _prefix_crc(f, size)
        return crc if found is not None and found[0] == crc else None
    if isinstance(sha, str):  # an older build's mark: its SHA-256 checked, a CRC from now on
        found = _prefix_crc(f, size, sha256=True)
        return found[0] if found is not None and found[1] == sha else None
    return None


def _chunks(f: BinaryIO) -> Iterator[tuple[bytes | bytearray, bool]]:
    """``(bytes, complete)``: runs of whole lines, then a last line still being written.

    A line longer than a chunk is gathered in one growing buffer and handed over alone,
    as that buffer: never copied again, and no longer held here while it is read.
    """
    pending = bytearray()
    while block := f.read(CHUNK):
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            pending += block
            continue
        if len(pending) >= CHUNK:
            first = block.find(b"\n") + 1
            pending += block[:first]
            held, pending = [pending], bytearray()
            yield held.pop(), True
            if first < cut:
                yield block[first:cut], True
        elif pending:
            pending += block[:cut]
            yield bytes(pending), True
        else:
            yield block[:cut], True
        pending = bytearray(block[cut:])
    if pending:
        held, pending = [pending], bytearray()
        yield held.pop(), False


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
    f, unreadable = _open(job)
    seen = table.marks.get("seen")
    with f if f is not None else contextlib.nullcontext():
        crc = None
        if f is not None and isinstance(seen, dict) and seen.get("format") == TABLE_FORMAT:
            crc = _same_prefix(f, seen)
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
        for chunk, complete in _chunks(f) if f is not None else ():
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
