"""verl's ``data.custom_cls``: the live pool as an RL dataset that grows after each step.

``data.custom_cls.path=pkg://statepool_dagster.trainers.verl``, ``name=LiveRLDataset``, and
under ``data.statepool``: ``store`` (else ``STATEPOOL_STORE_DIR``), ``sessions`` (the
folder rollout workers seal states into, else ``STATEPOOL_SESSIONS_DIR``), ``feedback``,
``select`` (keys of :class:`SelectionOptions`, else the ``STATEPOOL_SELECT_*``
variables), ``split`` (with ``val_fraction`` and ``seed``, as the export splits runs),
``storage_options`` (fsspec's, for URLs), ``cache_dir``, ``new_first``.
``data.train_files`` is not read, but verl requires it. Rows are those of ``statepool
export --format verl`` (``extra_info`` with the source fields; ``weight``, with a weight,
as it was when the state came in).

Each state's row is written once, when it first comes in, to an Arrow file in a folder of
this process (under ``cache_dir``, else the temporary folder; removed at exit; never in
the store) and read memory-mapped: the dataset is those files behind an indices mapping,
one slot per index. :meth:`LiveRLDataset.on_batch_end` (the legacy ``RayPPOTrainer``
calls it after each step) reads only the states new to the pool, and those whose row
changed (a run rebuilt: the pool's ``rekeyed``), a batch at a time (``export_rows``), and
measures only their prompts (as verl's ``filter_overlong_prompts`` does; counts are kept
per state). A changed row is written anew and serves at its state's slots. A slot
keeps its state while the selection keeps it; a slot whose state was left out takes a new
state, else a served one; further new states get slots at the end. An index the sampler
holds so stays valid, and the length never shrinks. With ``new_first`` (the default) new
states are served first, whatever index is asked for. Changes reach the dataloader only
with ``data.dataloader_num_workers=0`` (workers hold a copy until the next epoch). The v1
trainer never calls ``on_batch_end``: its replay buffer (:mod:`.verl_v1`) does.
"""

from __future__ import annotations

import functools
import itertools
import logging
import shutil
import tempfile
import weakref
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from omegaconf import OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tokenizer import normalize_token_ids

from ..core import Settings, UserCodeError, call_user, storage_errors
from ..core.export import ExportRow, verl_record, verl_schema
from ..core.feedback import SelectionOptions, feedback_folder
from ..live import LivePool
from .cursor import (
    CURSOR_FORMAT,
    CursorError,
    check_cursor,
    cursor_digest,
    pack_positions,
    unpack_positions,
)
from .row_files import BATCH_ROWS, RowFiles
from .verl_checkpoint import dataset_state

log = logging.getLogger(__name__)
_live: weakref.WeakSet[LiveRLDataset] = weakref.WeakSet()
_shown = itertools.count()  # a new fingerprint for each layout shown
COUNT_ROWS = 64  # prompts tokenized at once (their token ids are Python ints for a while)


def refresh_live_datasets() -> int:
    """Refresh every live dataset of this process (the v1 replay buffer calls it); how many."""
    datasets_ = list(_live)
    for dataset in datasets_:
        dataset.on_batch_end()
    return len(datasets_)


def _options(select: dict[str, Any] | None) -> SelectionOptions:
    if not select:
        return SelectionOptions.from_env()
    if select.get("difficulty_band"):
        select["difficulty_band"] = tuple(select["difficulty_band"])
    return SelectionOptions(**select)  # an unknown key: a TypeError that names it


class LiveRLDataset(RLHFDataset):
    """``RLHFDataset`` whose rows come from the live pool (see the module's doc)."""

    def _read_files_and_tokenize(self) -> None:
        own = self.config.get("statepool") or {}
        own = OmegaConf.to_container(own, resolve=True) if OmegaConf.is_config(own) else own
        settings = Settings.from_env(store_dir=own.get("store"))
        options = _options(own.get("select"))
        passed = ("split", "val_fraction", "seed", "storage_options")
        self._pool_args = dict(
            store=settings.store_dir,
            sessions=own.get("sessions") or settings.sessions_dir,
            options=options,
            feedback=own.get("feedback") or feedback_folder(settings),
            refresh_seconds=0.0,
            **{key: own[key] for key in passed if own.get(key) is not None},
        )
        self.pool = LivePool(**self._pool_args)
        self._restored: str | None = None  # the digest of the layout taken up
        self._pending = False  # a resumed layout's update not taken yet
        self._read_since = False  # a row read since the last update
        self.new_first = bool(own.get("new_first", True))
        self._limit = self.max_prompt_length if self.filter_overlong_prompts else float("inf")
        folder = tempfile.mkdtemp(prefix="statepool-live-", dir=own.get("cache_dir"))
        weakref.finalize(self, shutil.rmtree, folder, True)
        schema = datasets.Features.from_arrow_schema(verl_schema(True, options.weight is not None))
        self.files = RowFiles(Path(folder), schema.arrow_schema)  # as datasets writes it
        self.prompt_tokens: dict[str, int] = {}  # each state measured (0: not counted)
        self._ids, self._row_of = [], {}  # a row's state, a state's row
        self._slots = np.zeros(0, dtype=np.int64)  # an index's row
        self._slot_of: dict[str, int] = {}  # a served state's slot
        self._spare: list[int] = []  # slots serving a state that has another slot
        self._pooled: set[str] = set()  # the states the pool served at the last update
        self._fresh: deque[str] = deque()
        self._loads, self._unread, self._mark = 0, False, 0
        self._moved: dict[int, int] = {}  # an old row -> the row its state has now
        self._update()
        resume = own.get("resume_from")
        if resume:
            state = dataset_state(resume)
            if state is not None:
                self.load_state_dict(state)
        _live.add(self)

    @property
    def state_ids(self) -> list[str]:
        """The state at each index."""
        return [self._ids[row] for row in self._slots.tolist()]

    def state_dict(self) -> dict[str, Any]:
        """torchdata's ``Stateful``: which state each index serves, the new states queued
        to be served first, and the pool version they refer to (kept in the store). verl's
        ``StatefulDataLoader`` saves it in each checkpoint's ``data.pt``."""
        ids = self.pool.state_ids()
        at = {sid: i for i, sid in enumerate(ids)}
        try:
            version = self.pool.version()
        except storage_errors() as exc:  # the store is down: a checkpoint must still save
            log.warning("statepool: the store cannot keep the pool version now (%s): this "
                        "checkpoint resumes from the pool as it is then", exc)  # fmt: skip
            return {"format": CURSOR_FORMAT, "version": None}
        body = {
            "format": CURSOR_FORMAT,
            "store": str(self.pool.store),
            "version": version,
            "slots": pack_positions([at.get(self._ids[row], -1) for row in self._slots.tolist()]),
            "fresh": pack_positions([at[sid] for sid in self._fresh if sid in at]),
            "loads": self._loads,
            "pending": self._read_since,  # rows read since the last update (legacy: saved first)
        }
        return {**body, "digest": cursor_digest(body)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Serve at each index the state it served when ``state`` was saved, on the pool
        as of that version; states that came in since are taken in at the next step."""
        if isinstance(state, dict) and state.get("version", "") is None:
            log.warning("statepool: this checkpoint was saved while the store was down: "
                        "drawing from the pool as it is")  # fmt: skip
            return
        check_cursor(state, self.pool)
        if state["digest"] == self._restored:
            return
        self.pool = LivePool(**self._pool_args, as_of=state["version"])
        version = self.pool.as_of.state_ids
        kept = set(version)
        for sid in [s for s in self.prompt_tokens if s not in kept]:  # new since: new then
            del self.prompt_tokens[sid]
        ids = self.pool.state_ids()
        self._write([i for i, sid in enumerate(ids) if sid in kept and sid not in self._row_of])
        slots = [
            version[p] if p >= 0 else None for p in unpack_positions(state["slots"], len(version))
        ]
        served = next((sid for sid in slots if sid in self._row_of), None)
        if served is None:
            raise CursorError("no state of the cursor's pool version can be read now")
        self._slot_of, self._spare = {}, []
        rows = []
        for slot, sid in enumerate(slots):
            if sid not in self._row_of:  # gone since: a served state's row, as a shrink does
                sid = served
            rows.append(self._row_of[sid])
            if sid in self._slot_of:
                self._spare.append(slot)
            else:
                self._slot_of[sid] = slot
        self._slots = np.array(rows, dtype=np.int64)
        fresh = unpack_positions(state["fresh"], len(version))
        self._fresh = deque(version[p] for p in fresh)
        self._pooled = kept
        self._loads = state["loads"]
        self._mark = self.pool.rekeyed(0)[1]
        self._show()
        self._restored = state["digest"]
        self._unread = True  # the next update looks at every state, those new since too
        # Saved between a step's reads and its update (the legacy trainer saves before
        # on_batch_end): that update comes before the next row is read, after the sampler
        # took the length it had, as it came then. (v1's buffer refreshes before the save.)
        self._pending = bool(state.get("pending", True))

    def on_batch_end(self, batch: Any = None) -> None:
        """Take in what changed in the pool (verl's legacy trainer calls it after each step)."""
        self._read_since = False
        if self.pool.refresh() or self._unread:
            self._update()

    def __getitem__(self, item: int) -> dict:
        if self._pending:
            self._pending = False
            self.on_batch_end()
        self._read_since = True
        while self._fresh:
            slot = self._slot_of.get(self._fresh.popleft())
            if slot is not None:
                return super().__getitem__(slot)
        return super().__getitem__(item % len(self.dataframe))

    def _update(self) -> None:
        ids = self.pool.state_ids()
        rekeyed, self._mark = self.pool.rekeyed(self._mark)  # rows changed: read again
        redo = [sid for sid in rekeyed if self.prompt_tokens.pop(sid, None) is not None]
        cut = len(ids)  # the pool's new states come after those it served before
        while cut and ids[cut - 1] not in self._pooled:
            cut -= 1
        left = cut < len(self._pooled)  # a state the pool served is gone
        if left:
            self._pooled = set(ids)
        self._pooled.update(ids[cut:])
        start = 0 if left or self._unread else cut  # else only the new states are looked at
        self._unread = False
        tokens = self.prompt_tokens
        first = len(self._ids)
        at = {sid: i for i, sid in enumerate(ids)} if redo else {}
        redo = [sid for sid in redo if at.get(sid, start) < start]  # others are looked at anyway
        measured = self._write([i for i in range(start, len(ids)) if ids[i] not in tokens]
                               + [at[sid] for sid in redo])  # fmt: skip
        added = set(self._ids[first:]) - set(rekeyed)  # a row read again is no new state
        limit = self._limit
        incoming = [sid for sid in [*ids[start:], *redo] if sid not in self._slot_of
                    and (n := tokens.get(sid)) is not None and n <= limit]  # fmt: skip
        gone = [sid for sid in self._slot_of if sid not in self._pooled] if left else []
        gone += [s for s, n in measured.items() if n > limit and s in self._slot_of]  # grown
        if self._moved:  # every slot of an old row: its new row
            table = np.arange(len(self._ids))
            table[list(self._moved)] = list(self._moved.values())
            self._slots, self._moved = table[self._slots], {}
        self._place(incoming, gone, [sid for sid in incoming if sid in added])

    def _write(self, positions: list[int]) -> dict[str, int]:
        """Read, measure and write the rows of these pool positions (those that fit); each
        row's prompt tokens."""
        if not positions:
            return {}
        weighted = "weight" in self.files.schema.names
        kept: list[str] = []
        measured: dict[str, int] = {}

        def tables() -> Iterator[pa.Table]:
            for start in range(0, len(positions), BATCH_ROWS):
                rows = self._rows(positions[start : start + BATCH_ROWS])
                measured.update(self._measure(rows))
                rows = [r for r in rows if measured[r.state_id] <= self._limit]
                kept.extend(r.state_id for r in rows)
                records = [verl_record(r, True, weighted) for r in rows]
                yield pa.Table.from_pylist(records, schema=self.files.schema)

        self.files.add(tables())
        for sid in kept:  # once the file is whole: a row number per state written
            if sid in self._row_of:  # its row changed (a run rebuilt): the new row serves
                self._moved[self._row_of[sid]] = len(self._ids)
            self._row_of[sid] = len(self._ids)
            self._ids.append(sid)
        self.prompt_tokens.update(measured)
        log.info("statepool: %d new states, %d too long", len(measured), len(measured) - len(kept))
        return measured

    def _rows(self, positions: list[int]) -> list[ExportRow]:
        """The rows that can be read now (read together); the others at the next step."""
        try:
            rows, n = self.pool.export_rows(positions), len(self.pool)
        except (OSError, IndexError):  # not readable now, or a state left: the next step
            rows, n = [], 0
        rows = [r for i, r in zip(positions, rows, strict=True)  # not a stand-in row
                if i < n and r.state_id == self.pool.state_id(i)]  # fmt: skip
        self._unread = self._unread or len(rows) < len(positions)
        return rows

    def _measure(self, rows: list[ExportRow]) -> dict[str, int]:
        """Each row's prompt tokens: the export's count, else counted as verl counts them."""
        counts = {r.state_id: r.prompt_tokens for r in rows if r.prompt_tokens is not None}
        todo = [r for r in rows if r.prompt_tokens is None]
        if not todo or not self.filter_overlong_prompts:
            return counts | {r.state_id: 0 for r in todo}
        if self.processor is not None:  # verl's own filter (a processor), in this process
            messages = [r.messages() for r in todo]
            light = datasets.Dataset.from_dict({self.prompt_key: messages, "_k": range(len(todo))})
            self.num_workers, workers = None, self.num_workers
            fit = set(self.maybe_filter_out_long_prompts(light)["_k"])
            self.num_workers = workers
            over = self.max_prompt_length + 1
            return counts | {r.state_id: 0 if k in fit else over for k, r in enumerate(todo)}
        return counts | dict(zip([r.state_id for r in todo], self._count(todo), strict=True))

    def _count(self, rows: list[ExportRow]) -> list[int]:
        """verl 0.9's ``doc2len`` for a tokenizer, a batch at a time (a prompt it cannot
        template is too long, as in verl)."""
        kwargs = dict(self.apply_chat_template_kwargs)
        if self.tool_schemas is not None:
            kwargs["tools"] = self.tool_schemas
        for key in ("tokenize", "return_dict", "return_tensors"):
            kwargs.pop(key, None)
        template = functools.partial(
            self.tokenizer.apply_chat_template, add_generation_prompt=True, tokenize=True, **kwargs
        )

        def batch(batch_rows: list[ExportRow]) -> list[int]:
            ids = template([r.messages() for r in batch_rows])
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            return [len(one) if isinstance(one, list) else len(normalize_token_ids(one))
                    for one in ids]  # fmt: skip

        def alone(row: ExportRow) -> int:
            return len(normalize_token_ids(template(row.messages())))

        # Every error, as verl's own doc2len catches: a chat template is the model's Jinja
        # and tokenizer code, and a prompt verl drops must not stop training here.
        try:
            counts = []
            for start in range(0, len(rows), COUNT_ROWS):
                counts += call_user(batch, rows[start : start + COUNT_ROWS])
            return counts
        except UserCodeError:  # one prompt spoilt the batch: each alone
            counts = []
            for row in rows:
                try:
                    counts.append(call_user(alone, row))
                except UserCodeError as error:  # as above; verl drops such a prompt too
                    log.warning(
                        "statepool: state %s: prompt not templated: %s", row.state_id, error.raised
                    )
                    counts.append(self.max_prompt_length + 1)
            return counts

    def _place(self, incoming: list[str], gone: list[str], added: list[str]) -> None:
        """Slots for the incoming states; a slot keeps its state while it is served."""
        # free: slots of states gone, and spare ones (a second slot of a served state)
        free = sorted([*self._spare, *(self._slot_of.pop(sid) for sid in gone)])
        grown = max(0, len(incoming) - len(free))
        slots = np.concatenate([self._slots, np.zeros(grown, dtype=np.int64)])
        free += range(len(self._slots), len(slots))
        for slot, sid in zip(free, incoming, strict=False):
            slots[slot], self._slot_of[sid] = self._row_of[sid], slot
        self._spare = free[len(incoming) :]
        moved = [slot for slot in self._spare if self._ids[slots[slot]] not in self._slot_of]
        served = list(self._slot_of) if moved else []
        for k, slot in enumerate(moved if served else ()):  # the pool shrank: a served state
            slots[slot] = slots[self._slot_of[served[k * len(served) // len(moved)]]]
        if moved and not served:
            log.warning("statepool: the selection leaves every state out; serving the last ones")
        self._slots = slots
        if self.new_first and self._loads:
            self._fresh.extend(added)
        self._loads += 1
        self._show()

    def _show(self) -> None:
        """The dataset verl indexes: the row files behind the slots."""
        slots = self._slots
        fingerprint = f"statepool-live-{id(self):x}-{next(_shown)}"
        self.dataframe = self.files.dataset(fingerprint)
        if not np.array_equal(slots, np.arange(len(self.dataframe))):
            self.dataframe = self.dataframe.select(
                slots, keep_in_memory=True, new_fingerprint=fingerprint + "-slots"
            )
