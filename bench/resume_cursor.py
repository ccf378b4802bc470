"""What resuming costs (issue 39): a pool version and a cursor at the live bench's sizes.

    python bench/resume_cursor.py --sizes 10k-sessions,100k

On a live-bench corpus (``live_corpus.py``, generated and synced once under
``bench/out/live/``; the store is copied so its ``pool_versions/`` stay apart): a plain
``LivePool`` open; ``pool.version()`` the first time (written) and again (the same content,
not written); a cursor after half the pool was drawn (``DrawOrder.state_dict``, the version
included), its JSON size; taking it up (``LivePool(as_of=...)`` then
``DrawOrder.resumed``). Each figure is the median of ``--repeat`` in this process (wall, s).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from live_corpus import ensure, folder
from measure import BENCH

sys.path.insert(0, str(BENCH.parent))

from statepool_dagster.live import LivePool
from statepool_dagster.trainers.cursor import DrawOrder


def timed(call, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def measure(size: str, repeat: int) -> dict:
    ensure(BENCH / "out", size)
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "store"
        shutil.copytree(folder(BENCH / "out", size) / "store", store)
        opened, pool = timed(lambda: LivePool(store), repeat)
        first, version = timed(pool.version, 1)
        pool.refresh(force=True)
        again, _ = timed(pool.version, repeat)
        order = DrawOrder(pool, weighted=False, seed=0)
        for _ in range(len(pool) // 2):
            order.next()
        saved, cursor = timed(lambda: order.state_dict(), repeat)
        text = json.dumps(cursor)
        as_of, resumed_pool = timed(lambda: LivePool(store, as_of=cursor["version"]), repeat)
        take_up, _ = timed(lambda: DrawOrder.resumed(resumed_pool, False, 0, cursor), repeat)
    return {
        "size": size, "states": len(pool), "open_s": round(opened, 3),
        "version_first_s": round(first, 3), "version_again_s": round(again, 3),
        "cursor_save_s": round(saved, 3), "cursor_bytes": len(text),
        "as_of_open_s": round(as_of, 3), "as_of_vs_open": round(as_of / opened, 2),
        "cursor_take_up_s": round(take_up, 3), "version": version,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10k-sessions,100k")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in args.sizes.split(","):
        print(json.dumps(measure(size, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
