"""The core alone, no Dagster: every run's four stages into a store folder.

python bench/core_only.py RUNS_DIR STORE_DIR [--workers N]   prints the states built
python bench/core_only.py --imports-only                     loads what it needs, no work
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import STATES
from statepool_dagster.core.runs.files import discover_runs

try:
    from statepool_dagster.core.store.rows import load_arrow
except ImportError:  # older trees (--code): before store/arrow_memory.py joined rows.py
    try:
        from statepool_dagster.core.store.arrow_memory import load_arrow
    except ImportError:  # the tree before core/store/tables.py was split
        from statepool_dagster.core.store.tables import load_arrow

try:
    from statepool_dagster.core.stages import build_run
except ImportError:  # the tree before the stages moved (8f4e46c and earlier)
    from statepool_dagster.core.build import build_run


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path, nargs="?")
    parser.add_argument("store", type=Path, nargs="?")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--imports-only", action="store_true", help="the fixed cost alone")
    args = parser.parse_args()
    # pyarrow imports pandas on its first array; before the fork, as run_each does.
    load_arrow()
    if args.imports_only:
        return 0
    if args.runs is None or args.store is None:
        parser.error("RUNS_DIR and STORE_DIR are required")
    settings = Settings(runs_dir=str(args.runs), store_dir=str(args.store))
    names = discover_runs(args.runs).names
    build = functools.partial(build_run, settings)
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        states = sum(reports[STATES].rows for reports in pool.map(build, names))
    print(states)
    return 0


if __name__ == "__main__":
    sys.exit(main())
