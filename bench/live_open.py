"""The live pool's open alone: ``LivePool(store=STORE)`` over a synced store, its CPU.

    python bench/live_open.py STORE     prints {"states": N, "open_cpu_s": S}

The process's imports are left out of the figure (a trainer has them loaded already).
"""

from __future__ import annotations

import json
import sys
import time

from statepool_dagster.live.pool import LivePool


def main() -> int:
    started = time.process_time()
    pool = LivePool(store=sys.argv[1])
    states = len(pool)
    print(json.dumps({"states": states, "open_cpu_s": round(time.process_time() - started, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
