"""The core alone, no Dagster: every run's states and prompts into a store folder.

python bench/core_only.py RUNS_DIR STORE_DIR [--workers N]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from statepool_dagster.core.collect import read_run
from statepool_dagster.core.prompt_spec import default_prompt_spec
from statepool_dagster.core.render import build_curator_prompt
from statepool_dagster.core.run_files import discover_runs
from statepool_dagster.core.store import StoreLayout, write_parquet_atomic, write_state_pool
from statepool_dagster.core.tables import prompts_table


def one_run(run_dir: Path, store: Path) -> int:
    read = read_run(run_dir)
    layout = StoreLayout(store)
    texts = [(j.state.state_id, j.state.to_json()) for j in read.states]
    write_state_pool(layout, read.run, texts)
    spec = default_prompt_spec()
    rows = [
        (j.state.state_id, read.run, j.version, build_curator_prompt(j.state, spec))
        for j in read.states
    ]
    import pyarrow as pa

    frame = prompts_table(rows)
    write_parquet_atomic(
        layout.table("curator_prompts", read.run), pa.Table.from_pandas(frame, preserve_index=False)
    )
    return len(read.states)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path)
    parser.add_argument("store", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs = [r.path for r in discover_runs(args.runs).runs]
    with ProcessPoolExecutor(args.workers) as pool:
        total = sum(pool.map(one_run, runs, [args.store] * len(runs)))
    print(total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
