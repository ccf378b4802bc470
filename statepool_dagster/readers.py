"""Read the store without Dagster: the state pool and the curator prompts, straight from files.

No instance, no webserver: ``from statepool_dagster import load_state_pool, load_prompts``.
Temp files (dot-named, mid-write) are never read. The store may be an fsspec URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

from .compat import load_state_pool as _load_pool_dir
from .core.config import Settings
from .core.errors import StatepoolError
from .core.names import PROMPTS, STATE_POOL
from .core.runs.files import natural_key
from .core.states.models import CheckpointState
from .core.store.layout import StoreLayout
from .core.store.reading import read_run_table
from .core.store.schemas import PROMPT_COLUMNS

if TYPE_CHECKING:  # imported where a DataFrame is made: most callers never pay for pandas
    import pandas as pd

# Nullable columns whose pandas dtype the Arrow type alone does not give.
PANDAS_DTYPES = {"correct": "boolean", "declared_version": "Int64"}
StorePath = str | os.PathLike[str]


def _layout(store: StorePath | None) -> StoreLayout:
    return StoreLayout(Settings.from_env().store_dir if store is None else store)


def _pick(available: Iterable[str], runs: Iterable[str] | None, what: str) -> list[str]:
    """The runs to read, in natural order; a requested run the store lacks is an error."""
    have = set(available)
    if runs is None:
        return sorted(have, key=natural_key)
    wanted = list(dict.fromkeys([runs] if isinstance(runs, str) else runs))
    missing = [r for r in wanted if r not in have]
    if missing:
        runs = "run" if len(missing) == 1 else "runs"
        raise StatepoolError(f"no {what} in the store for {runs}: {', '.join(missing)}")
    return sorted(wanted, key=natural_key)


def _pool_runs(layout: StoreLayout) -> list[str]:
    root = layout.root / STATE_POOL
    if not root.is_dir():
        return []
    return [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]


def load_state_pool(
    store: StorePath | None = None, runs: Iterable[str] | None = None
) -> list[CheckpointState]:
    """Every state in ``<store>/state_pool/``, in run (natural) then checkpoint order: the
    original's ``load_state_pool`` (:func:`.compat.load_state_pool`) over each run's folder.

    ``store`` defaults to ``STATEPOOL_STORE_DIR``; ``runs`` limits the runs read.
    """
    layout = _layout(store)
    states: list[CheckpointState] = []
    for run in _pick(_pool_runs(layout), runs, "state pool"):
        states.extend(_load_pool_dir(layout.state_pool(run)))
    return states


def load_prompts(store: StorePath | None = None, runs: Iterable[str] | None = None) -> pd.DataFrame:
    """The ``curator_prompts`` tables of the store's runs, one row per state, in run order."""
    layout = _layout(store)
    tables = [
        read_run_table(layout, PROMPTS, run)
        for run in _pick(layout.runs_with(PROMPTS), runs, "curator prompts")
    ]
    tables = [t for t in tables if t.num_rows]
    import pandas as pd

    if not tables:
        ints = {"version", "prompt_chars"}
        return pd.DataFrame(
            {n: pd.Series(dtype="int64" if n in ints else "object") for n in PROMPT_COLUMNS}
        )
    # Tables written before a column was added lack it: it comes back as nulls.
    return to_frame(pa.concat_tables(tables, promote_options="permissive"))


def to_frame(table: pa.Table) -> pd.DataFrame:
    """A store table as a DataFrame, nullable flags and integers kept nullable."""
    frame = table.to_pandas()
    return frame.astype({c: t for c, t in PANDAS_DTYPES.items() if c in frame.columns})
