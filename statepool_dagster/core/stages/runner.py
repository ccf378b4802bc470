"""The routine every build stage runs over one run's table: a part reused where its key is
stored, a part written where it is not, the parts no longer made dropped, then the table's
marks, its first rows as the UI shows them, the table saved, the stage's rejects set aside
and its report. A stage supplies only what is its own: its keys, how it makes a part and
what it reports."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from ..names import RejectSource
from ..rejects import Reject
from ..store.layout import update_rejects
from ..store.part_files import Part
from ..store.parts import RunTable
from ..store.preview import markdown_preview, markdown_rows
from .job import OpenTables, StageReport, reject_lines

VIEWS = "views"  # the table's mark: rendered first rows, by the keys of their checkpoints
VIEW_CHARS = 1 << 16  # a rendered view longer than this is not kept in the index


@dataclass(frozen=True)
class View:
    """What a stage shows of its table in the UI: its first ``rows`` rows of ``columns``,
    rendered, under ``label`` in the report's Markdown (by default as a Markdown table).

    ``from_table`` renders rows read back from the table; ``from_rows`` the same rows as
    they were written (tuples of Python values, as Arrow gives them back): both render
    the same text.
    """

    label: str
    columns: list[str]
    rows: int = 10
    from_table: Callable[[pa.Table], str] | None = None
    from_rows: Callable[[list[tuple]], str] | None = None

    def of(self, table: RunTable, written: dict[str, tuple] | None = None) -> str:
        """The view of ``table``, kept in its marks while the checkpoints that hold its rows
        stay: a grown run's view reads nothing (its first part may hold 512 checkpoints, a
        footer that grows with the run). Call it before the table's ``save``.

        ``written``: the view's columns of one-row parts written this build, by part; where
        they are the first rows, the view is made of them, never read back.
        """
        label, columns, rows = self.label, self.columns, self.rows
        shown, count, first = [label, *columns, str(rows)], 0, []
        for name in table.names():
            if count >= rows:
                break
            part = table.parts[name]
            shown.append(f"{name}:{part.key}")
            count += part.info.get("rows", 1)
            first.append(name)
        key = hashlib.blake2b("\0".join(shown).encode(), digest_size=16).hexdigest()
        views = table.marks.get(VIEWS)
        cached = views.get(label) if isinstance(views, dict) else None
        if isinstance(cached, list) and len(cached) == 2 and cached[0] == key:
            return cached[1]
        if written is not None and count == len(first) and all(n in written for n in first):
            from_rows = self.from_rows or partial(markdown_rows, columns)
            text = from_rows([written[n] for n in first])
        else:
            from_table = self.from_table or partial(markdown_preview, columns=columns)
            text = from_table(table.head(columns, rows))
        views = {k: v for k, v in (views or {}).items() if k != label}
        if len(text) <= VIEW_CHARS:  # a huge first prompt is read again, never indexed
            views[label] = [key, text]
        table.mark(**{VIEWS: views})
        return text


def preview(columns: list[str]) -> View:
    """A stage's first ten rows of ``columns`` as a Markdown table, shown as ``preview``."""
    return View("preview", columns)


@dataclass(frozen=True)
class Stage:
    """What a stage is to the runner: its table, where its rejects go, what it shows."""

    asset: str
    rejects: RejectSource
    view: View
    reject_details: str = "reject_details"  # the report's Markdown of the rejects


@dataclass
class StagePass:
    """One build of one stage over one run's table (the caller holds the run's lock).

    Each part is either kept (``reuse``/``keep``) or made (``write``/``write_row``); what
    neither touched is dropped by :meth:`finish`, which then marks, saves and sets the
    stage's rejects aside; :meth:`report` says what the stage did.
    """

    stage: Stage
    run: str
    tables: OpenTables
    table: RunTable = field(init=False)
    rejects: list[Reject] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    shown: str = ""
    fingerprint: str = ""
    # The view's columns of the first rows written, by part: the view is made of them
    # rather than read back.
    heads: dict[str, tuple] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.table = self.tables.open(self.stage.asset, self.run)
        at = self.table.schema.get_field_index
        self._head_columns = [at(column) for column in self.stage.view.columns]

    def stored(self, name: str) -> Part | None:
        """The stored part of ``name``, if any."""
        return self.table.parts.get(name)

    def reuse(self, name: str, key: str) -> bool:
        """Keep ``name``'s stored part if it was made from ``key``; whether it was."""
        part = self.table.parts.get(name)
        if part is None or part.key != key:
            return False
        self.kept.add(name)
        return True

    def keep(self, *names: str) -> None:
        """Keep the stored parts of ``names`` as they are."""
        self.kept.update(names)

    def write_row(self, name: str, row: tuple, key: str, info: dict[str, Any]) -> None:
        """Make ``name``'s part: one row, made from ``key``, with its facts ``info``."""
        self.table.write_row(name, row, key, info)
        self.kept.add(name)
        self.written.add(name)
        heads = self.heads
        if name not in heads and len(heads) >= self.stage.view.rows:
            last = max(heads)
            if name > last:  # parts are mostly written in order: this is the common case
                return
            del heads[last]
        heads[name] = tuple(row[i] for i in self._head_columns)

    def write(
        self, name: str, rows: pa.Table, key: str, info: dict[str, Any], data: int | None = None
    ) -> None:
        """Make ``name``'s part of ``rows`` (``data``: its share of their buffers)."""
        self.table.write(name, rows, key, info, data)
        self.kept.add(name)
        self.written.add(name)
        self.heads.pop(name, None)  # its view is read back: only one-row parts are kept

    def drop(self, name: str) -> None:
        """``name`` has no part any more."""
        self.table.drop(name)
        self.kept.discard(name)
        self.written.discard(name)
        self.heads.pop(name, None)

    def finish(self, fingerprint: str, **marks: Any) -> None:
        """Drop the parts neither kept nor made, mark the table (its inputs' ``fingerprint``
        and the stage's own ``marks``), render its view, save it, set the rejects aside."""
        table = self.table
        for name in set(table.parts) - self.kept:
            table.drop(name)
        self.fingerprint = fingerprint
        table.mark(**marks, fingerprint=fingerprint)
        self.shown = self.stage.view.of(table, self.heads)
        table.save()
        update_rejects(self.tables.layout, self.run, self.stage.rejects, self.rejects)

    @property
    def reused(self) -> int:
        """The parts kept as they were stored."""
        return len(self.kept - self.written)

    def infos(self) -> list[dict[str, Any]]:
        """The facts of every part, in checkpoint order."""
        parts = self.table.parts
        return [parts[name].info for name in self.table.names()]

    def report(
        self,
        values: dict[str, int | float | str],
        *,
        rows: int | None = None,
        reused: int | None = None,
        json: dict[str, Any] | None = None,
        notes: list[str] | None = None,
    ) -> StageReport:
        """The stage's report: its ``values`` (``rows``: the table's parts unless given;
        ``reused``: the parts kept as stored unless given), its view and its rejects."""
        report = StageReport(
            self.run,
            self.fingerprint,
            len(self.table.parts) if rows is None else rows,
            values=values,
            json=json or {},
            markdown={self.stage.view.label: self.shown},
            notes=notes or [],
            reused=self.reused if reused is None else reused,
        )
        if self.rejects:
            report.markdown[self.stage.reject_details] = reject_lines(self.rejects)
        return report
