"""The store's runs in the live pool's index: a run is indexed again only when one of its
two tables' ``.index.json`` changed.

Indexing a run reads its prompt and state tables' indexes (``RunTable``: each checkpoint's
part, row and keys), checks that every prompt was rendered from the stored state (as the
export's ``_agree`` does, from the indexes' keys where they carry them), and computes the
de-duplication digest of each state it has not seen under the same key: only then is a
state's text read, a few checkpoints at a time, and let go. A run whose tables disagree
(a rebuild under way) keeps its last indexed entries until they agree.
"""

from __future__ import annotations

import logging

from ..core.export.collect import _agree
from ..core.export.rows import ExportOptions, split_of, state_text_digest
from ..core.locations import AnyPath
from ..core.names import PROMPTS, STATES, TABLE_INDEX
from ..core.runs.files import natural_key
from ..core.runs.names import run_name_problem
from ..core.store.arrow_memory import utf8_views
from ..core.store.batches import CheckpointBatches
from ..core.store.layout import StoreLayout
from ..core.store.part_files import read_spans
from ..core.store.parts import RunTable
from ..core.store.schemas import SCHEMAS
from .entries import RUN, Entry
from .stamps import Stamp, file_stamp, index_stamps
from .stored import open_parquet

log = logging.getLogger(__name__)

BATCH = 256  # states read at a time for their digests

# An entry's locator: (prompts file, its span, states file, its span, the state's key).
P_FILE, P_SPAN, S_FILE, S_SPAN, S_KEY = range(5)


class RunIndex:
    """Each run's entries, by run and checkpoint, and the stamps they were indexed at."""

    def __init__(self, root: AnyPath, options: ExportOptions):
        self.layout = StoreLayout(root)
        self.options = options
        self.stamps: dict[str, tuple[Stamp, Stamp]] = {}
        self.entries: dict[str, dict[str, Entry]] = {}
        self._waiting: dict[str, tuple[Stamp, Stamp]] = {}  # disagreeing, logged at these stamps

    def refresh(self) -> tuple[list[Entry], list[tuple]] | None:
        """``(entries added or replaced, copies removed)`` since the last refresh; ``None``
        when the store could not be listed (nothing changes then)."""
        prompts = index_stamps(self.layout.root / PROMPTS)
        states = index_stamps(self.layout.root / STATES)
        if prompts is None or states is None:
            return None
        now = {
            run: (prompts[run], states[run])
            for run in prompts.keys() & states.keys()
            if run_name_problem(run) is None
        }
        added: list[Entry] = []
        removed: list[tuple] = []
        for run in self.stamps.keys() - now.keys():
            removed += [e.copy for e in self.entries.pop(run, {}).values()]
            del self.stamps[run]
        for run in sorted(now, key=natural_key):
            if self.stamps.get(run) != now[run]:
                change = self.index_run(run, now[run])
                if change is not None:
                    added += change[0]
                    removed += change[1]
        return added, removed

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
        old = self.entries.get(run, {})
        self.entries[run] = fresh
        self.stamps[run] = stamp
        removed = [e.copy for name, e in old.items() if name not in fresh]
        added = [e for name, e in fresh.items() if _changed(old.get(name), e)]
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
                return _agree(p, s)
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
            if before is not None and before.where[S_KEY] == states.parts[name].key:
                digests[name] = before.digest
            else:
                unknown.append(name)
        digests.update(_digests(states, unknown))
        entries = {}
        for name in names:
            p, s = prompts.parts[name], states.parts[name]
            where = (p.file, p.span(), s.file, s.span(), s.key)
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
