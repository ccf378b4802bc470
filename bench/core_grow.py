"""The four stages' own time (no Dagster) for one run, built from nothing, then grown.

python bench/core_grow.py ROOT SPEC_JSON   prints {"full_s", "grown_s"} as JSON
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from statepool_dagster.core.config import Settings
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

try:
    from statepool_dagster.core.stages import build_run
except ImportError:  # the tree before the stages moved (8f4e46c and earlier)
    from statepool_dagster.core.build import build_run


def main() -> int:
    root = Path(sys.argv[1])
    shutil.rmtree(root, ignore_errors=True)
    spec = SampleSpec(**json.loads(sys.argv[2]))
    run = generate_run(root / "runs" / "run000", spec, 0)
    generate_run(root / "runs" / "warm", spec, 1)
    settings = Settings(runs_dir=str(root / "runs"), store_dir=str(root / "store"))
    build_run(settings, "warm")  # first-call costs (imports, prompt spec) are not the run's
    started = time.perf_counter()
    build_run(settings, "run000")
    full = time.perf_counter() - started
    append_checkpoint(run, spec, 0)
    started = time.perf_counter()
    build_run(settings, "run000")
    grown = time.perf_counter() - started
    print(json.dumps({"full_s": full, "grown_s": grown}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
