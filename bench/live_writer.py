"""A rollout worker for the live-pool bench: seals a segment of new states on request.

    python bench/live_writer.py SESSIONS_FOLDER

Reads lines ``FIRST COUNT`` on stdin; for each, appends ``COUNT`` states of the sessions
bench's shape (``gen-FIRST`` …) to the session ``bench`` with ``StateWriter``, seals the
segment, and prints the wall-clock time (``time.time()``) at which it was sealed.
"""

from __future__ import annotations

import os
import sys
import time

from sessions_pool import small_state

from statepool_dagster.core.sessions import StateWriter

SESSION = "bench"


def main() -> int:
    folder = sys.argv[1]
    with StateWriter(folder, SESSION, writer=f"probe{os.getpid()}") as writer:
        for line in sys.stdin:
            first, count = map(int, line.split())
            for k in range(first, first + count):
                writer.append(small_state(k), policy_step=k)
            writer.seal()
            print(f"{time.time():.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
