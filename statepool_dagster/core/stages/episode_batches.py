"""An episodes table's batches: rows gathered by version, written once the file moves past them."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..store.arrow_memory import release_arrow_memory, utf8_views
from ..store.part_files import part_name
from ..store.parts import RunTable
from ..store.rows import EpisodeRow, episodes_table
from .job import TABLE_FORMAT, digest_pieces


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


ROWS_IN_PYTHON = 4096  # rows of a batch held as tuples before they become Arrow columns


class Batches:
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
