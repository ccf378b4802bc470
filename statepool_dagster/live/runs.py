"""The store's runs in the live pool's index: a run is indexed again only when one of its
two tables' ``.index.json`` changed.

Indexing a run reads its prompt and state tables' indexes (``RunTable``: each checkpoint's
part, row and keys), checks that every prompt was rendered from the stored state (as the
export's ``tables_agree`` does, from the indexes' keys where they carry them), and computes the
de-duplication digest of each state it has not seen under the same key: only then is a
state's text read, a few checkpoints at a time, and let go. A run whose tables disagree
(a rebuild under way) keeps its last indexed entries until they agree.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from ..core import AnyPath, Stamp, file_stamp, is_local
from ..core.export import ExportOptions, split_of, tables_agree
from ..core.names import PROMPTS, STATES, TABLE_INDEX, run_name_problem
from ..core.runs import natural_key
from ..core.states import state_digest_hex, state_text_digest
from ..core.store import SCHEMAS, CheckpointBatches, RunTable, StoreLayout, read_spans, utf8_views
from .entries import RUN, Entry, run_place
from .stamps import index_stamps, subfolders
from .stored import open_parquet
from .unavailable import at_once

log = logging.getLogger(__name__)

BATCH = 256  # states read at a time for their digests
SLICE = 64  # known runs whose index stamps a refresh looks at: a refresh costs the same at any size


class RunIndex:
    """Each run's entries, by run and checkpoint, and the stamps they were indexed at."""

    def __init__(self, root: AnyPath, options: ExportOptions):
        self.layout = StoreLayout(root)
        self.options = options
        self.stamps: dict[str, tuple[Stamp, Stamp]] = {}
        self.entries: dict[str, dict[str, Entry]] = {}
        self._waiting: dict[str, tuple[Stamp, Stamp]] = {}  # disagreeing, logged at these stamps
        self._names: dict[str, bool] = {}  # run name -> whether it is a valid run name
        self._cycle: list[str] | None = None  # known runs, looked at SLICE a refresh
        self._at = 0
        self._folders: tuple = ()  # the two asset folders' stamps when last listed
        self.fetch: Callable[..., Any] = at_once  # an object store's listings: the deadline
        self._both: set[str] | None = None
        self._relisted = True  # the listing was taken again: look for runs gone

    def refresh(self) -> tuple[list[Entry], list[tuple]] | None:
        """``(entries added or replaced, copies removed)`` since the last refresh; ``None``
        when the store could not be listed (nothing changes then)."""
        now = self._stamps()
        if now is None:
            return None
        listed, stamps = now
        added: list[Entry] = []
        removed: list[tuple] = []
        gone = [r for r in self.stamps if r not in listed] if self._relisted else []
        self._relisted = not is_local(self.layout.root)
        for run in gone:
            removed += [e.copy for e in self.entries.pop(run, {}).values()]
            del self.stamps[run]
            self._cycle = None
        for run in sorted(stamps, key=natural_key):
            if self.stamps.get(run) != stamps[run]:
                change = self.index_run(run, stamps[run])
                if change is not None:
                    added += change[0]
                    removed += change[1]
        return added, removed

    def _stamps(self) -> tuple[set[str], dict[str, tuple[Stamp, Stamp]]] | None:
        """The runs listed, and the index stamps of those to look at now: on a local disk
        new runs, waiting runs and the next :data:`SLICE` known ones (each run is looked at
        once every ``runs / SLICE`` refreshes); through fsspec all, from one listing each."""
        root = self.layout.root
        if not is_local(root):
            prompts = self.fetch(index_stamps, root / PROMPTS)
            states = self.fetch(index_stamps, root / STATES)
            if prompts is None or states is None:
                return None
            both = {r for r in prompts.keys() & states.keys() if self._named(r)}
            return both, {r: (prompts[r], states[r]) for r in both}
        folders = (file_stamp(root / PROMPTS), file_stamp(root / STATES))
        if folders != self._folders or self._both is None:  # a run folder came or went
            prompts, states = subfolders(root / PROMPTS), subfolders(root / STATES)
            if prompts is None or states is None:
                return None
            self._both = {r for r in set(prompts).intersection(states) if self._named(r)}
            self._folders = folders
            self._relisted = True
        both = self._both
        look = list(self._waiting)
        if len(both) != len(self.stamps) or self._cycle is None:
            look += [r for r in both if r not in self.stamps]
        if self._cycle is None:
            self._cycle, self._at = sorted(self.stamps), 0
        if self._cycle:
            look += [self._cycle[(self._at + k) % len(self._cycle)] for k in range(SLICE)]
            self._at = (self._at + SLICE) % len(self._cycle)
        stamps = {}
        prompts_dir, states_dir = os.fspath(root / PROMPTS), os.fspath(root / STATES)
        for run in set(look) & both:
            pair = (
                file_stamp(os.path.join(prompts_dir, run, TABLE_INDEX)),
                file_stamp(os.path.join(states_dir, run, TABLE_INDEX)),
            )
            if None not in pair:
                stamps[run] = pair
        return both, stamps

    def _named(self, run: str) -> bool:
        ok = self._names.get(run)
        if ok is None:
            ok = self._names[run] = run_name_problem(run) is None
        return ok

    def index_run(
        self, run: str, stamp: tuple[Stamp, Stamp] | None = None
    ) -> tuple[list[Entry], list[tuple]] | None:
        """Index ``run`` again; ``None`` when its tables disagree or could not be read."""
        layout = self.layout
        if stamp is None:  # out of turn (a row not found): only a run still listed
            stamp = (
                file_stamp(layout.table(PROMPTS, run) / TABLE_INDEX),
                file_stamp(layout.table(STATES, run) / TABLE_INDEX),
            )
            if None in stamp:
                return None
        try:
            prompts = RunTable(layout.table(PROMPTS, run), SCHEMAS[PROMPTS])
            states = RunTable(layout.table(STATES, run), SCHEMAS[STATES])
            try:
                if not self._agree(prompts, states):
                    self._wait(run, stamp)
                    return None
                fresh = self._entries(run, prompts, states)
            finally:
                prompts.close()
                states.close()
        except (OSError, KeyError, ValueError) as exc:  # a part went meanwhile: next refresh
            log.debug("live pool: run %s not indexed now: %s", run, exc)
            return None
        self._waiting.pop(run, None)
        if run not in self.stamps:
            self._cycle = None
        old = self.entries.get(run, {})
        self.entries[run] = fresh
        self.stamps[run] = stamp
        removed = [e.copy for name, e in old.items() if name not in fresh]
        added = []
        for name, entry in fresh.items():
            if _changed(old.get(name), entry):
                added.append(entry)
            else:  # the entry the pool holds already: one object per state, not two
                fresh[name] = old[name]
        return added, removed

    def _wait(self, run: str, stamp: tuple[Stamp, Stamp]) -> None:
        if self._waiting.get(run) != stamp:
            self._waiting[run] = stamp
            log.warning(
                "live pool: run %s: its prompts were not rendered from its current states "
                "(a rebuild under way?): its last indexed rows are served meanwhile",
                run,
            )

    @staticmethod
    def _agree(prompts: RunTable, states: RunTable) -> bool:
        """Whether every prompt's state is the stored one (the keys from the indexes)."""
        for name, part in prompts.parts.items():
            made = part.info.get("from")
            if not isinstance(made, list) or len(made) < 2:  # an index without them
                p, s = CheckpointBatches(prompts), CheckpointBatches(states)
                return tables_agree(p, s)
            state = states.parts.get(name)
            if state is None or state.key != made[1]:
                return False
        return True

    def _entries(self, run: str, prompts: RunTable, states: RunTable) -> dict[str, Entry]:
        split = split_of(run, self.options)
        order = tuple(natural_key(run))
        old = self.entries.get(run, {})
        names = sorted(prompts.parts)
        ids = self._ids(names, prompts, states)
        digests: dict[str, bytes] = {}
        unknown = []
        for name in names:
            before = old.get(name)
            recorded = state_digest_hex(states.parts[name].info)
            if before is not None and before.where.state_key == states.parts[name].key:
                digests[name] = before.digest
            elif recorded is not None:  # recorded as the state was built
                digests[name] = bytes.fromhex(recorded)
            else:
                unknown.append(name)
        digests.update(_digests(states, unknown))
        entries = {}
        for name in names:
            p, s = prompts.parts[name], states.parts[name]
            where = run_place((p.file, p.span(), s.file, s.span(), s.key, p.key))
            entries[name] = Entry(
                RUN, (run, name), ids[name], digests[name], (0, order, name), split, where
            )
        return entries

    @staticmethod
    def _ids(names: list[str], prompts: RunTable, states: RunTable) -> dict[str, str]:
        ids = {}
        for name in names:
            sid = prompts.parts[name].info.get("state_id") or states.parts[name].info.get(
                "state_id"
            )
            if sid is None:  # an index without them: the column, read once
                column = CheckpointBatches(prompts).read(names, ["state_id"])["state_id"]
                return dict(zip(names, column.to_pylist(), strict=True))
            ids[name] = sid
        return ids


def _digests(states: RunTable, names: list[str]) -> dict[str, bytes]:
    """Each checkpoint's state digest, its text read a part file and :data:`BATCH` states at
    a time (one call each, memory-mapped where local) and let go."""
    by_file: dict[str, list[str]] = {}
    for name in names:
        by_file.setdefault(states.parts[name].file, []).append(name)
    digests = {}
    for file, wanted in sorted(by_file.items()):
        with open_parquet(states.folder / file) as parquet:
            for start in range(0, len(wanted), BATCH):
                chunk = wanted[start : start + BATCH]
                spans = [states.parts[name].span() for name in chunk]
                column = read_spans(parquet, spans, ["state"])["state"]
                for name, text in zip(chunk, utf8_views(column), strict=True):
                    digests[name] = state_text_digest(text)
                del text, column
    return digests


def _changed(old: Entry | None, new: Entry) -> bool:
    return old is None or old.where != new.where or old.digest != new.digest or old.sid != new.sid
