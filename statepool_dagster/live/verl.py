"""verl's ``data.custom_cls``: the live pool as an RL dataset that grows after each step.

``data.custom_cls.path=pkg://statepool_dagster.live.verl``, ``name=LiveRLDataset``, and
under ``data.statepool``: ``store`` (else ``STATEPOOL_STORE_DIR``), ``sessions`` (the
folder rollout workers seal states into, else ``STATEPOOL_SESSIONS_DIR``), ``feedback``,
``select`` (keys of :class:`SelectionOptions`, else the ``STATEPOOL_SELECT_*``
variables), ``split`` (with ``val_fraction`` and ``seed``, as the export splits runs),
``cache_dir``, ``new_first``. ``data.train_files`` is not read, but verl requires it.
Rows are those of ``statepool export --format verl`` (``extra_info`` with the source
fields; ``weight``, with a weight, as it was when the state came in).

Each state's row is written once, when it first comes in, to an Arrow file in a folder of
this process (under ``cache_dir``, else the temporary folder; removed at exit; never in
the store) and read memory-mapped: the dataset is those files behind an indices mapping,
one slot per index. :meth:`LiveRLDataset.on_batch_end` (the legacy ``RayPPOTrainer``
calls it after each step) reads only the states new to the pool and measures only their
prompts (as verl's ``filter_overlong_prompts`` does; counts are kept per state). A slot
keeps its state while the selection keeps it; a slot whose state was left out takes a new
state, else a served one; further new states get slots at the end. An index the sampler
holds so stays valid, and the length never shrinks. With ``new_first`` (the default) new
states are served first, whatever index is asked for. Changes reach the dataloader only
with ``data.dataloader_num_workers=0`` (workers hold a copy until the next epoch).

The v1 trainer never calls ``on_batch_end``: its replay buffer is the hook there
(:mod:`.verl_v1`), refreshing every live dataset of the process before each sample.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tokenizer import normalize_token_ids

from ..core.config import Settings
from ..core.export.records import verl_record, verl_schema
from ..core.export.rows import ExportRow
from ..core.feedback.importers import feedback_folder
from ..core.feedback.select import SelectionOptions
from .pool import LivePool

log = logging.getLogger(__name__)
_live: weakref.WeakSet[LiveRLDataset] = weakref.WeakSet()
BATCH_ROWS = 1_000  # rows read, measured and written at a time: what a load holds at once


def refresh_live_datasets() -> int:
    """Refresh every live dataset of this process (the v1 replay buffer calls it); how many."""
    datasets_ = list(_live)
    for dataset in datasets_:
        dataset.on_batch_end()
    return len(datasets_)


def _options(config: Any) -> SelectionOptions:
    select = (config.get("statepool") or {}).get("select") if config is not None else None
    if not select:
        return SelectionOptions.from_env()
    band = select.get("difficulty_band")
    return SelectionOptions(
        drop_zero_variance=select.get("drop_zero_variance"),
        difficulty_band=tuple(band) if band else None,
        band_on=select.get("band_on") or "match",
        weight=select.get("weight"),
    )


class RowFiles:
    """Rows appended to Arrow files in ``folder``, memory-mapped and read as one dataset.

    A row keeps its number for good. The last two files are merged while the last is at
    least half the size of the one before (as a binary counter carries): a few files,
    each row rewritten a few times, and a small addition stays a small write.
    """

    def __init__(self, folder: Path, schema: pa.Schema):
        self.folder, self.schema = folder, schema
        self.parts: list[datasets.Dataset] = []
        self.rows = 0
        self._files = 0
        self._joined: datasets.Dataset | None = None

    def add(self, tables: Iterable[pa.Table]) -> int:
        """Append the rows of ``tables`` (one file); how many."""
        part = self._write(tables)
        if len(part):
            self.parts.append(part)
            self.rows += len(part)
            self._joined = None
            while len(self.parts) > 1 and 2 * len(self.parts[-1]) >= len(self.parts[-2]):
                merged = self._write(p.data.table for p in self.parts[-2:])
                for old in self.parts[-2:]:
                    Path(old.cache_files[0]["filename"]).unlink()
                self.parts[-2:] = [merged]
        return len(part)

    def _write(self, tables: Iterable[pa.Table]) -> datasets.Dataset:
        path = self.folder / f"rows-{self._files:06d}.arrow"
        self._files += 1
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, self.schema) as out:
            for table in tables:
                out.write_table(table, max_chunksize=BATCH_ROWS)
        return datasets.Dataset.from_file(str(path))

    def dataset(self) -> datasets.Dataset:
        if self._joined is None:
            if not self.parts:
                return datasets.Dataset(datasets.table.InMemoryTable(self.schema.empty_table()))
            self._joined = datasets.concatenate_datasets(self.parts)
        return self._joined


class LiveRLDataset(RLHFDataset):
    """``RLHFDataset`` whose rows come from the live pool (see the module's doc)."""

    def _read_files_and_tokenize(self) -> None:
        own = self.config.get("statepool") or {}
        settings = Settings.from_env(store_dir=own.get("store"))
        options = _options(self.config)
        self.pool = LivePool(
            settings.store_dir,
            sessions=own.get("sessions") or settings.sessions_dir,
            options=options,
            feedback=own.get("feedback") or feedback_folder(settings),
            split=own.get("split"),
            val_fraction=float(own.get("val_fraction", 0.0)),
            seed=int(own.get("seed", 0)),
            refresh_seconds=0.0,
        )
        self.new_first = bool(own.get("new_first", True))
        folder = tempfile.mkdtemp(prefix="statepool-live-", dir=own.get("cache_dir"))
        weakref.finalize(self, shutil.rmtree, folder, True)
        self.files = RowFiles(Path(folder), verl_schema(True, options.weight is not None))
        self.prompt_tokens: dict[str, int] = {}  # every state measured, kept or not
        self._ids: list[str] = []  # a row's state
        self._row_of: dict[str, int] = {}
        self._slots = np.zeros(0, dtype=np.int64)  # an index's row
        self._slot_of: dict[str, int] = {}
        self._fresh: deque[str] = deque()
        self._loads = 0
        self._unread = False
        self._update()
        _live.add(self)

    @property
    def state_ids(self) -> list[str]:
        """The state at each index."""
        return [self._ids[row] for row in self._slots.tolist()]

    def on_batch_end(self, batch: Any = None) -> None:
        """Take in what changed in the pool (verl's legacy trainer calls it after each step)."""
        if self.pool.refresh() or self._unread:
            before = len(self._slot_of)
            self._update()
            log.info("statepool: %d -> %d states after a step", before, len(self._slot_of))

    def __getitem__(self, item: int) -> dict:
        while self._fresh:
            slot = self._slot_of.get(self._fresh.popleft())
            if slot is not None:
                return super().__getitem__(slot)
        return super().__getitem__(item % len(self.dataframe))

    def _update(self) -> None:
        ids = self.pool.state_ids()
        self._unread = False
        new = [i for i, sid in enumerate(ids) if sid not in self.prompt_tokens]
        first = len(self._ids)
        if new:
            self._write(new)
        added = set(self._ids[first:])
        wanted = [sid for sid in ids if self._fits(sid)]
        self._place(wanted, [sid for sid in wanted if sid in added])

    def _fits(self, state_id: str) -> bool:
        tokens = self.prompt_tokens.get(state_id)
        if tokens is None:
            return False
        return not self.filter_overlong_prompts or tokens <= self.max_prompt_length

    def _write(self, positions: list[int]) -> None:
        """Read, measure and write the rows of these pool positions (those that fit)."""
        weighted = "weight" in self.files.schema.names
        kept: list[str] = []
        measured: dict[str, int] = {}

        def tables() -> Iterator[pa.Table]:
            for start in range(0, len(positions), BATCH_ROWS):
                rows = self._rows(positions[start : start + BATCH_ROWS])
                measured.update(self._measure(rows))
                rows = [r for r in rows if measured[r.state_id] <= self._limit()]
                kept.extend(r.state_id for r in rows)
                records = [verl_record(r, True, weighted) for r in rows]
                yield pa.Table.from_pylist(records, schema=self.files.schema)

        self.files.add(tables())
        for sid in kept:  # once the file is whole: a row number per state written
            self._row_of[sid] = len(self._ids)
            self._ids.append(sid)
        self.prompt_tokens.update(measured)
        if len(kept) < len(measured):
            log.info(
                "statepool: %d of %d new states over max_prompt_length %d, not served",
                len(measured) - len(kept), len(measured), self.max_prompt_length,
            )  # fmt: skip

    def _rows(self, positions: list[int]) -> list[ExportRow]:
        """The rows that can be read now; the others are read at the next step."""
        rows = []
        for i in positions:
            try:
                row = self.pool.export_row(i)
            except OSError:  # the pool has logged it
                row = None
            if row is not None and row.state_id == self.pool.state_id(i):  # not a stand-in
                rows.append(row)
            else:
                self._unread = True
        return rows

    def _limit(self) -> float:
        return self.max_prompt_length if self.filter_overlong_prompts else float("inf")

    def _measure(self, rows: list[ExportRow]) -> dict[str, int]:
        """Each row's prompt tokens: the export's count, else counted as verl counts them."""
        counts = {r.state_id: r.prompt_tokens for r in rows if r.prompt_tokens is not None}
        todo = [r for r in rows if r.prompt_tokens is None]
        if not self.filter_overlong_prompts:
            return counts | {r.state_id: 0 for r in todo}
        if self.processor is not None:  # verl's own filter: images, videos, processor
            light = datasets.Dataset.from_dict(
                {self.prompt_key: [r.messages() for r in todo], "_k": list(range(len(todo)))}
            )
            workers, self.num_workers = self.num_workers, None
            try:
                fit = set(self.maybe_filter_out_long_prompts(light)["_k"])
            finally:
                self.num_workers = workers
            over = self.max_prompt_length + 1
            return counts | {r.state_id: 0 if k in fit else over for k, r in enumerate(todo)}
        return counts | {r.state_id: self._count(r.messages()) for r in todo}

    def _count(self, messages: list[dict[str, str]]) -> int:
        """verl 0.9's ``doc2len`` for a tokenizer (a prompt it cannot template is too long)."""
        kwargs = dict(self.apply_chat_template_kwargs)
        if self.tool_schemas is not None:
            kwargs["tools"] = self.tool_schemas
        for key in ("tokenize", "return_dict", "return_tensors"):
            kwargs.pop(key, None)
        try:
            ids = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, **kwargs
            )
        except Exception as exc:  # verl drops such a prompt too (and prints its traceback)
            log.warning("statepool: a prompt could not be templated, not served: %s", exc)
            return self.max_prompt_length + 1
        return len(normalize_token_ids(ids))

    def _place(self, wanted: list[str], added: list[str]) -> None:
        """Give each wanted state a slot; a slot keeps its state while it is wanted."""
        keep = set(wanted)
        placed: dict[str, int] = {}
        holes: list[int] = []
        for slot, row in enumerate(self._slots.tolist()):
            sid = self._ids[row]
            if sid in keep and sid not in placed:
                placed[sid] = slot
            else:  # left out, or a second slot of a state: a new state may take it
                holes.append(slot)
        incoming = [sid for sid in wanted if sid not in placed]
        grown = max(0, len(incoming) - len(holes))
        slots = np.concatenate([self._slots, np.zeros(grown, dtype=np.int64)])
        free = [*holes, *range(len(self._slots), len(slots))]
        for slot, sid in zip(free, incoming, strict=False):
            slots[slot], placed[sid] = self._row_of[sid], slot
        left = holes[len(incoming) :]
        for k, slot in enumerate(left if wanted else ()):  # the pool shrank: serve served ones
            slots[slot] = slots[placed[wanted[k * len(wanted) // len(left)]]]
        if left and not wanted:
            log.warning("statepool: the selection leaves every state out; serving the last ones")
        self._slots, self._slot_of = slots, placed
        if self.new_first and self._loads:
            self._fresh.extend(added)
        self._loads += 1
        fingerprint = f"statepool-live-{id(self):x}-{self._loads}"
        self.dataframe = self.files.dataset().select(
            slots, keep_in_memory=True, new_fingerprint=fingerprint
        )
