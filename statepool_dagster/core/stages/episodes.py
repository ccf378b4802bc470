"""``run_episodes``: every usable line of episodes.jsonl, one part per episode batch.

A file that only grew is read from where the last build stopped and only the batches its
new lines belong to are written again; otherwise the whole file is parsed and only the
batches that changed are. Whether the bytes before that point are unchanged is told by a
probe of a constant size (their length, their first and last 64 KB, and 4 KB at eight
evenly spaced places), so absorbing a checkpoint costs the same however long the run: an
edit that keeps every byte count and avoids the probed places goes unseen until the file
is read from the start again (any change of the table format, or a rebuilt store).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadRecordError
from ..locations import is_local
from ..names import EPISODES, EPISODES_FILE
from ..rejects import UNSTORABLE, Reject, storable
from ..runs.episodes import EpisodesRead, parse_episodes
from ..runs.notes import present, run_notes
from ..runs.opening import open_run_file
from ..store.arrow_memory import release_arrow_memory, utf8_views
from ..store.part_files import part_name
from ..store.parts import RunTable
from ..store.pool import read_rejects, update_rejects
from ..store.rows import EpisodeRow, episode_row, episodes_table
from .job import (
    TABLE_FORMAT,
    RunJob,
    StageReport,
    digest_pieces,
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


EDGE, SPOT, SPOTS = 1 << 16, 1 << 12, 8  # the probe: bytes at each end; at each spot; spots


def _probe(f: BinaryIO, size: int) -> str:
    """A digest of the first ``size`` bytes' length and of a constant number of them."""
    h = hashlib.blake2b(str(size).encode(), digest_size=16)
    spans = [(0, EDGE), (max(0, size - EDGE), EDGE)]
    spans += [(size * i // (SPOTS + 1), SPOT) for i in range(1, SPOTS + 1)]
    for start, length in spans:
        f.seek(start)
        h.update(f.read(max(0, min(length, size - start))))
    return h.hexdigest()


def _same_prefix(f: BinaryIO, seen: dict) -> bool:
    """Whether the file still starts with the bytes the last build read (by their probe)."""
    same = isinstance(seen.get("probe"), str) and _probe(f, seen["bytes"]) == seen["probe"]
    f.seek(seen["bytes"])
    return same


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


def _write_batch(table: RunTable, version: int, batch: pa.Table, data: int | None) -> bool:
    """Store one batch's part unless the stored one holds the same lines; True if written."""
    lines = batch["line"].to_pylist()
    records = utf8_views(batch["record"])
    numbered = ((f"{n}:".encode(), r) for n, r in zip(lines, records, strict=True))
    key = digest_pieces([(TABLE_FORMAT.encode(),), *numbered])
    name = part_name(version)
    if name in table.parts and table.parts[name].key == key:
        return False
    flags = [c for c in batch["correct"].to_pylist() if c is not None]
    info = {
        "version": version,
        "rows": batch.num_rows,
        # what states are keyed by
        "batch": digest_pieces([(str(len(records)).encode(),), *((r,) for r in records)]),
        "max_line": max(lines, default=0),
        "scored": len(flags),
        "correct": sum(flags),
    }
    del records
    table.write(name, batch, key, info, data)
    return True


def _stored_lines(table: RunTable, seen: dict) -> int:
    """How many stored rows come from lines before the mark (a tail line read unfinished: 1)."""
    rows = sum(p.info["rows"] for p in table.parts.values())
    return rows - any(p.info["max_line"] > seen["lines"] for p in table.parts.values())


ROWS_IN_PYTHON = 4096  # rows of a batch held as tuples before they become Arrow columns


class _Batches:
    """Rows grouped by version; a batch is written once a whole chunk of the file passed
    without it (so interleaved versions are not written again and again)."""

    def __init__(self, table: RunTable, keep_lines: int | None):
        self.table = table
        self.keep_lines = keep_lines  # a grown file: stored rows up to this line stay
        self.pending: dict[int, list[EpisodeRow]] = {}
        self.converted: dict[int, list[pa.Table]] = {}  # a long batch's earlier rows
        self.in_chunk: set[int] = set()
        self.done: set[int] = set()
        self.written: set[int] = set()

    def add(self, version: int, row: EpisodeRow) -> None:
        rows = self.pending.setdefault(version, [])
        rows.append(row)
        self.in_chunk.add(version)
        if len(rows) >= ROWS_IN_PYTHON:  # as Python objects a row takes ~3× its bytes
            self.converted.setdefault(version, []).append(episodes_table(rows))

    def _pop(self, versions: list[int]) -> Iterator[tuple[int, pa.Table, int | None]]:
        """Each version's rows as a table, with its share of their buffers (``None``: its own).

        The pending rows of all ``versions`` become Arrow in one conversion, then slices.
        """
        rows: list[EpisodeRow] = []
        spans = []
        for version in versions:
            pending = self.pending.pop(version)
            spans.append((version, len(rows), len(pending)))
            rows += pending
            pending.clear()  # the rows only in ``rows``: let go as they become Arrow
        if not spans:
            return
        fresh = episodes_table(rows)
        total = fresh.num_rows
        data = fresh.get_total_buffer_size()
        for version, start, count in spans:
            pieces = [*self.converted.pop(version, []), fresh.slice(start, count)]
            if len(pieces) > 1:
                yield version, pa.concat_tables(pieces), None
            else:
                yield version, pieces[0], data * count // max(total, 1)

    def end_chunk(self) -> None:
        """Write the batches this chunk had no line of: the file has moved past them."""
        for batch in self._pop([v for v in self.pending if v not in self.in_chunk]):
            self._store(*batch)
        self.in_chunk.clear()

    def flush(self) -> None:
        for batch in self._pop(list(self.pending)):
            self._store(*batch)

    def _store(self, version: int, fresh: pa.Table, data: int | None = None) -> None:
        name = part_name(version)
        parts = [fresh]
        if name in self.table.parts and (version in self.done or self.keep_lines is not None):
            old = self.table.read_part(name).cast(fresh.schema)
            release_arrow_memory(old.nbytes)  # the pages it was read from
            if version not in self.done:  # a grown file: the stored rows before the mark stay
                stay = pc.less_equal(old["line"], self.keep_lines)
                if not pc.all(stay).as_py():  # a filter copies every column, kept rows too
                    old = old.filter(stay)
            parts.insert(0, old)
            data = None
        batch = pa.concat_tables(parts) if len(parts) > 1 else fresh
        self.done.add(version)
        if batch.num_rows:
            if _write_batch(self.table, version, batch, data):
                self.written.add(version)
        else:
            self.table.drop(name)

    def finish(self) -> None:
        """Write the last batch; drop (or, for a grown file, trim) batches no line came for."""
        self.flush()
        for part in list(self.table.parts.values()):
            version = part.info["version"]
            if version in self.done:
                continue
            if self.keep_lines is None or part.info["max_line"] > self.keep_lines:
                self._store(version, episodes_table([]))


def _add_episodes(
    batches: _Batches, read: EpisodesRead, display: str, strict: bool
) -> list[Reject]:
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
        grown = (
            f is not None
            and isinstance(seen, dict)
            and seen.get("format") == TABLE_FORMAT
            and _same_prefix(f, seen)
        )
        if not grown and f is not None:
            f.seek(0)
        rejects: list[Reject] = []
        if grown:
            old = read_rejects(job.layout, job.run, "episodes")
            rejects = [r for r in old if (r.line or 0) <= seen["lines"]]
            grown = _stored_lines(table, seen) + len(rejects) + seen["blank"] == seen["lines"]
            if not grown:  # parts lost or edited by hand: read the file again from the start
                rejects = []
                f.seek(0)
        marked, lines, blank = (seen["bytes"], seen["lines"], seen["blank"]) if grown else (0, 0, 0)
        batches = _Batches(table, lines if grown else None)
        tail_blank = 0
        notes: list[str] = []
        for chunk, complete in _chunks(f) if f is not None else ():
            read = parse_episodes(chunk, display, lines + 1, strict)
            if complete:  # a last line still being written is read, not marked
                marked += len(chunk)
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
        probe = "" if f is None else _probe(f, marked)
    rejects += [unreadable] if unreadable else []
    update_rejects(job.layout, job.run, "episodes", rejects)
    mark = {
        "bytes": marked,
        "lines": lines,
        "blank": blank,
        "probe": probe,
        "format": TABLE_FORMAT,
    }
    table.mark(seen=None if unreadable else mark, fingerprint=fingerprint)
    release_arrow_memory()  # what the batches' writing freed, before the preview reads
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
            "versions": [i["version"] for i in infos],
            "accuracy_by_version": {
                str(i["version"]): round3(i["correct"] / i["scored"]) for i in scored
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
