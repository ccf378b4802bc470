"""A ``datasets.IterableDataset`` over the live pool for TRL's ``GRPOTrainer``.

Rows are ``statepool export --format trl``'s rows with its source columns (and ``weight``
when a weight is asked for), made by the export's own ``trl_record``, each read from the
pool's index when it is served. The stream never
ends (set ``max_steps``) and refreshes the pool as it goes: a state sealed or synced after
training started is served next, before any state is served again; then round robin in
the pool's order (or a draw by weight); a state the selection leaves out is no longer
served. Use it with ``GRPOConfig(shuffle_dataset=False)``: TRL's shuffle buffer would
hold new states back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import storage_errors
from ..core.export import trl_record, trl_schema
from ..core.feedback import SelectionOptions
from ..live import LivePool, PoolUnavailable
from .cursor import CursorError, DrawOrder, check_cursor

WAIT_SECONDS = 1.0  # an empty pool is polled this often
DEFAULT_STREAM = "train"
log = logging.getLogger(__name__)
CURSOR_FILE = "statepool_cursor.json"  # beside a checkpoint's own files

_STREAMS: dict[str, DrawOrder] = {}  # the stream read now, by name
_RESUME: dict[str, dict[str, Any]] = {}  # the cursor a resumed trainer took up, by stream


def live_rows(
    store: str,
    sessions: str | None = None,
    options: dict[str, Any] | None = None,
    feedback: str | None = None,
    refresh_seconds: float = 1.0,
    seed: int = 0,
    split: str | None = None,
    val_fraction: float = 0.0,
    storage_options: dict[str, Any] | None = None,
    stream: str = DEFAULT_STREAM,
) -> Iterator[dict[str, Any]]:
    """Rows forever: states never served first (in the pool's order), then round robin or a
    weighted draw; from a resumed trainer's cursor when :class:`LivePoolCheckpoint` took
    one up for ``stream``."""
    selection = SelectionOptions(**(options or {}))
    cursor = _RESUME.pop(stream, None)
    pool = LivePool(
        store, sessions=sessions, options=selection, feedback=feedback, split=split,
        val_fraction=val_fraction, seed=seed, refresh_seconds=refresh_seconds,
        storage_options=storage_options, as_of=None if cursor is None else cursor["version"],
    )  # fmt: skip
    weighted = selection.weight is not None
    if cursor is None:
        order = DrawOrder(pool, weighted, seed)
    else:
        order = DrawOrder.resumed(pool, weighted, seed, cursor)
    _STREAMS[stream] = order
    misses = 0
    while True:
        pool.refresh()
        if pool.changes != order.synced:  # by a refresh, or a row found moved while read
            order.update()
        try:
            i = order.next()
            if i is None:
                time.sleep(WAIT_SECONDS)
                continue
            sid = pool.state_id(i)
        except IndexError:  # the pool shrank since the last update: take it in first
            order.update()
            continue
        try:
            row = pool.export_row(i)
        except (PoolUnavailable, IndexError):  # not readable now: another one now, it later
            row = None
        if row is None or row.state_id != sid:  # unreadable, or it moved while read
            order.later(sid)
            misses += 1
            if misses >= len(pool):  # none readable: the store is down, wait for it
                time.sleep(WAIT_SECONDS)
                misses = 0
            continue
        misses = 0
        yield trl_record(row, sources=True, weighted=weighted)


def live_trl_dataset(
    store: str | os.PathLike[str] | None = None,
    *,
    sessions: str | os.PathLike[str] | None = None,
    options: SelectionOptions | None = None,
    feedback: str | os.PathLike[str] | None = None,
    refresh_seconds: float = 1.0,
    seed: int = 0,
    split: str | None = None,
    val_fraction: float = 0.0,
    storage_options: dict[str, Any] | None = None,
    stream: str = DEFAULT_STREAM,
):
    """An endless ``datasets.IterableDataset`` over the pool in ``store`` (default: the setting).

    ``sessions``: the folder rollout workers seal states into (default: the setting); a
    state sealed there is served without waiting for Dagster. ``feedback``: a feedback
    folder to fold into ``state_stats`` as training goes (the one ``STATEPOOL_FEEDBACK_DIR``
    names, where ``trl_reward`` records), so the selection in ``options`` follows the
    trainer's own rewards. ``split``: ``None`` serves every state, ``"train"`` or ``"val"``
    one split, the runs split as ``statepool export --val-fraction val_fraction --seed seed``.
    ``stream``: the name :class:`LivePoolCheckpoint` knows this dataset by (one per dataset
    a trainer process reads).
    """
    from datasets import Features, IterableDataset

    from ..core import Settings

    settings = Settings.from_env()
    options = options or SelectionOptions()
    kwargs = {
        "store": str(store) if store is not None else settings.store_dir,
        "sessions": str(sessions) if sessions is not None else settings.sessions_dir,
        "options": {
            "drop_zero_variance": options.drop_zero_variance,
            "difficulty_band": options.difficulty_band,
            "band_on": options.band_on,
            "weight": options.weight,
            "unseen_weight": options.unseen_weight,
        },
        "feedback": None if feedback is None else str(feedback),
        "refresh_seconds": refresh_seconds,
        "seed": seed,
        "split": split,
        "val_fraction": val_fraction,
        "storage_options": storage_options,  # fsspec's, for a store or sessions URL
        "stream": stream,
    }
    features = Features.from_arrow_schema(trl_schema(True, options.weight is not None))
    return IterableDataset.from_generator(live_rows, features=features, gen_kwargs=kwargs)


def load_cursor(checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """The cursor saved beside ``checkpoint`` (a ``checkpoint-<step>`` folder), checked whole."""
    path = Path(checkpoint) / CURSOR_FILE
    try:
        state = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise CursorError(f"{path}: no statepool cursor beside this checkpoint") from None
    except ValueError as exc:
        raise CursorError(f"{path}: not a statepool cursor ({exc})") from None
    try:
        check_cursor(state)
    except CursorError as exc:
        raise CursorError(f"{path}: {exc}") from None
    return state


def rows_consumed(args: Any, global_step: int) -> int:
    """How many rows of the stream GRPOTrainer trained on by ``global_step``: it draws
    ``generation_batch_size // num_generations`` prompts per generation, one generation per
    ``steps_per_generation * num_iterations`` micro-steps."""
    micro = global_step * args.gradient_accumulation_steps
    per_generation = args.steps_per_generation * getattr(args, "num_iterations", 1)
    generations = -(-micro // per_generation)
    return generations * (args.generation_batch_size // args.num_generations)


def _save_cursor(folder: Path, state: dict[str, Any]) -> None:
    """Write the cursor whole or not at all (a kill mid-write leaves the old one)."""
    data = json.dumps(state, sort_keys=True).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{CURSOR_FILE}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / CURSOR_FILE)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@functools.cache
def _checkpoint_callback() -> type:
    from transformers import TrainerCallback  # the trainer extra: imported when asked for

    class LivePoolCheckpoint(_CheckpointHooks, TrainerCallback):
        __doc__ = _CheckpointHooks.__doc__

    LivePoolCheckpoint.__module__ = __name__
    return LivePoolCheckpoint


def __getattr__(name: str) -> Any:
    if name == "LivePoolCheckpoint":
        return _checkpoint_callback()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CheckpointHooks:
    """A ``transformers`` callback: saves the live stream's cursor beside each checkpoint
    (``checkpoint-<step>/statepool_cursor.json``, with the pool version it names) and, on a
    resume, takes it up so the stream draws on from where training was.

    Use with ``GRPOConfig(ignore_data_skip=True)``: the stream itself goes on from the
    cursor, so the trainer must not replay and skip batches as well. With
    ``resume_from_latest=True`` a checkpoint whose pool version the store no longer keeps
    starts over from the pool as it is, with a warning, instead of failing.
    """

    def __init__(self, stream: str = DEFAULT_STREAM, resume_from_latest: bool = False):
        self.stream, self.resume_from_latest = stream, resume_from_latest

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step <= 0:
            return
        if not args.ignore_data_skip:
            raise ValueError(
                "LivePoolCheckpoint resumes the stream from its cursor: set "
                "ignore_data_skip=True, or the trainer skips the batches again"
            )
        cursor = load_cursor(Path(args.output_dir) / f"checkpoint-{state.global_step}")
        if self.resume_from_latest:
            from .versions import VersionGone, load_version

            try:
                load_version(cursor["store"], cursor["version"])
            except VersionGone as exc:
                log.warning("statepool: %s; drawing from the pool as it is now", exc)
                return
        _RESUME[self.stream] = cursor

    def on_save(self, args, state, control, **kwargs):
        order = _STREAMS.get(self.stream)
        if order is None:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        try:
            cursor = order.state_dict(rows_consumed(args, state.global_step))
        except (ValueError, *storage_errors()) as exc:  # the stream started over, or the
            # store is down (its version cannot be kept): no cursor rather than a wrong one
            log.warning("statepool: no cursor saved in %s: %s", folder, exc)
            return
        _save_cursor(folder, cursor)
