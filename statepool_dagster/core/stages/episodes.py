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
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..config import Settings
from ..errors import BadRecordError
from ..names import EPISODES, EPISODES_FILE, RejectSource
from ..rejects import UNSTORABLE, Reject
from ..runs.episodes import EpisodesRead, chunks, open_episodes, parse_episodes, same_prefix
from ..runs.files import Fingerprint
from ..runs.json_read import storable
from ..runs.opening import run_notes
from ..store.layout import read_rejects
from ..store.part_files import part_name
from ..store.parts import RunTable
from ..store.preview import recent
from ..store.rows import (
    EpisodeRow,
    episode_row,
    episodes_table,
    release_arrow_memory,
    release_if_large,
    utf8_views,
)
from .job import TABLE_FORMAT, OpenTables, StageReport, digest_pieces, round3, run_folder
from .runner import Stage, StagePass, preview

STAGE = Stage(
    EPISODES,
    RejectSource.EPISODES,
    preview(["line", "version", "id", "task", "gt", "response", "correct"]),
)
NOTES_LIMIT = 50  # notes about values kept whole but left out of a flat column


def _write_batch(stage: StagePass, version: int, batch: pa.Table, data: int | None) -> None:
    """Store one batch's part unless the stored one holds the same lines."""
    lines = batch["line"].to_pylist()
    records = utf8_views(batch["record"])
    numbered = ((f"{n}:".encode(), r) for n, r in zip(lines, records, strict=True))
    key = digest_pieces([(TABLE_FORMAT.encode(),), *numbered])
    name = part_name(version)
    if stage.reuse(name, key):
        return
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
    stage.write(name, batch, key, info, data)


ROWS_IN_PYTHON = 4096  # rows of a batch held as tuples before they become Arrow columns


class Batches:
    """Rows grouped by version; a batch is written once a whole chunk of the file passed
    without it (so interleaved versions are not written again and again)."""

    def __init__(self, stage: StagePass, keep_lines: int | None):
        self.stage = stage
        self.table = stage.table
        self.keep_lines = keep_lines  # a grown file: stored rows up to this line stay
        self.pending: dict[int, list[EpisodeRow]] = {}
        self.converted: dict[int, list[pa.Table]] = {}  # a long batch's earlier rows
        self.in_chunk: set[int] = set()
        self.done: set[int] = set()

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
            _write_batch(self.stage, version, batch, data)
        else:
            self.stage.drop(name)

    def finish(self) -> None:
        """Write the last batch; drop (or, for a grown file, trim) batches no line came for."""
        self.flush()
        for name, part in list(self.table.parts.items()):
            version = part.info["version"]
            if version in self.done:
                continue
            if self.keep_lines is None or part.info["max_line"] > self.keep_lines:
                self._store(version, episodes_table([]))
            else:  # a grown file: its lines before the mark stay as stored
                self.stage.keep(name)


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


def build_episodes(
    run: str, settings: Settings, tables: OpenTables, fingerprint: Fingerprint
) -> StageReport:
    """``run_episodes``: every usable line of episodes.jsonl; bad lines set aside.

    ``fingerprint``: the run's files as the step found them before any stage read them.
    """
    display = f"{run}/{EPISODES_FILE}"
    strict = settings.strict
    run_dir = run_folder(settings, run)
    stage = StagePass(STAGE, run, tables)
    table = stage.table
    f, unreadable = open_episodes(run_dir, display, strict)
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
            old = read_rejects(tables.layout, run, RejectSource.EPISODES)
            rejects = [r for r in old if (r.line or 0) <= seen["lines"]]
            grown = _stored_lines(table, seen) + len(rejects) + seen["blank"] == seen["lines"]
            if not grown:  # parts lost or edited by hand: read the file again from the start
                rejects = []
                f.seek(0)
        if not grown:
            crc = 0
        marked, lines, blank = (seen["bytes"], seen["lines"], seen["blank"]) if grown else (0, 0, 0)
        batches = Batches(stage, lines if grown else None)
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
        if unreadable is None:
            batches.finish()
        else:  # a file that cannot be read now keeps what was stored
            stage.keep(*table.parts)
    stage.rejects = rejects + ([unreadable] if unreadable else [])
    mark = {
        "bytes": marked,
        "lines": lines,
        "blank": blank,
        "crc32": None if f is None else crc,
        "format": TABLE_FORMAT,
    }
    release_if_large()  # what the batches' writing freed, before the view reads them back
    stage.finish(fingerprint.digest, seen=None if unreadable else mark)
    infos = sorted(stage.infos(), key=lambda i: i["version"])
    return _report(stage, infos, blank + tail_blank, run_notes(run_dir) + notes)


def _report(stage: StagePass, infos: list[dict], blank_lines: int, notes: list[str]) -> StageReport:
    total = sum(i["rows"] for i in infos)
    scored = [i for i in infos if i["scored"]]
    report = stage.report(
        {
            "episodes": total,
            "rejects": len(stage.rejects),
            "blank_lines": blank_lines,
            "batches": len(infos),
            "batches_written": len(stage.written),
        },
        rows=total,
        json={
            "versions": [i["version"] for i in recent(infos)],
            "accuracy_by_version": {
                str(i["version"]): round3(i["correct"] / i["scored"]) for i in recent(scored)
            },
        },
        notes=notes,
    )
    if scored:
        flags = sum(i["scored"] for i in scored)
        report.values["accuracy"] = round(sum(i["correct"] for i in scored) / flags, 4)
    return report
