"""The core alone, no Dagster: every run's four stages into a store folder.

python bench/core_only.py RUNS_DIR STORE_DIR [--workers N]
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
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.store.arrow_memory import load_arrow


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path)
    parser.add_argument("store", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    settings = Settings(runs_dir=str(args.runs), store_dir=str(args.store))
    names = discover_runs(args.runs).names
    build = functools.partial(build_run, settings)
    load_arrow()  # before the fork, as run_stage does
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        states = sum(reports[STATES].rows for reports in pool.map(build, names))
    print(states)
    return 0


if __name__ == "__main__":
    sys.exit(main())
