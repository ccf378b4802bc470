"""How a run table drops and merges its parts: row groups copied to a new part, never in place."""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

from ..locations import AnyPath
from .part_files import MERGE, Part, file_order, mergeable, tier
from .part_writer import PartWriter


class Compaction:
    """The part of :class:`parts.RunTable` that prunes and merges its part files."""

    folder: AnyPath
    parts: dict[str, Part]
    _files: dict[str, list[list[Any]]]
    _spans: dict[str, list[list[int]] | None]
    _writer: PartWriter | None
    _dirty: bool

    def _file(self, name: str) -> pq.ParquetFile:  # RunTable's
        raise NotImplementedError

    def _start_writer(self) -> PartWriter:
        raise NotImplementedError

    def _finish_writer(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _prune(self, file: str, groups: set[int]) -> None:
        """Drop entries ``groups`` of ``file``: its current checkpoints move to a new part, then
        it goes.

        Never rewritten in place, so a reader holding its group numbers never gets other
        rows; the copy goes one row group at a time; a kill between the two leaves both,
        and the newer wins when the table is next loaded.
        """
        self._move({file: groups})

    def _compact(self) -> None:
        """Merge small parts of a size, :data:`MERGE` at a time, into one (tiered, as an LSM tree).

        A run grown one checkpoint at a time adds a part per growth; merged this way it
        keeps at most ``MERGE - 1`` parts per size tier (tiers grow by ``MERGE``×), and each
        row is copied once per tier, never the run at each growth. Tiers are merged while
        the result stays within :data:`PART_ROWS` (parts of 1–7 rows into 8–63, those into
        64–511), so such a run keeps about n / 64 files. The part holding the newest
        checkpoint is left alone: the next growth replaces it.
        """
        newest = max(self.parts, default=None)
        while True:
            tiers: dict[int, list[str]] = {}
            for file, rows in self._files.items():
                if rows and mergeable(len(rows)) and all(row[0] != newest for row in rows):
                    tiers.setdefault(tier(len(rows)), []).append(file)
            full = [files for files in tiers.values() if len(files) >= MERGE]
            if not full:
                return
            self._move({file: set() for file in sorted(full[0], key=file_order)[:MERGE]})

    def _move(self, sources: dict[str, set[int]]) -> None:
        """The current checkpoints of ``sources`` (less each one's dropped entries) go to one new
        part, in order; then the sources are removed."""
        moved = False
        for file, groups in sorted(sources.items(), key=lambda item: file_order(item[0])):
            rows = self._files.get(file, [])
            if -1 in groups:
                continue
            source, read = None, (-1, None)
            for at, row in enumerate(rows):
                part = self.parts.get(row[0])
                if at in groups or part is None or (part.file, part.entry) != (file, at):
                    continue  # dropped, or stored again elsewhere
                writer = self._writer if moved else self._start_writer()
                moved = True
                source = source or self._file(file)
                if read[0] != part.group:  # a row group is read once for its checkpoints
                    read = (part.group, source.read_row_group(part.group, use_threads=False))
                group = read[1]
                rows_of = group.num_rows - part.offset if part.rows < 0 else part.rows
                share = group.get_total_buffer_size() * rows_of // max(group.num_rows, 1)
                span = writer.append(group.slice(part.offset, rows_of), row, share)
                part.place(writer.file, len(writer.rows) - 1, span)
        if moved:
            self._finish_writer()
        self.close()
        self._dirty = True
        for file in sources:
            (self.folder / file).unlink(missing_ok=True)
            self._files.pop(file, None)
            self._spans.pop(file, None)
