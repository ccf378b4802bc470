"""One sensor tick over N materialized run folders, again, then with M new folders.

python bench/sensor_tick.py ROOT N M   prints the tick times and run requests as JSON

The sensor is the code location's own (``runs_sensor`` from the real Definitions),
invoked directly with a context on a temporary instance.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from dagster import AssetMaterialization, build_sensor_context, instance_for_test


def make(runs: Path, name: str) -> Path:
    folder = runs / name
    folder.mkdir()
    (folder / "episodes.jsonl").write_text('{"id": 1}\n')
    return folder


def main() -> int:
    root, unchanged, new = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    runs = root / "runs"
    runs.mkdir(parents=True)
    (root / "home").mkdir()
    os.environ.update(
        STATEPOOL_RUNS_DIR=str(runs),
        STATEPOOL_STORE_DIR=str(root / "store"),
        STATEPOOL_SETTLE_SECONDS="0",
    )
    # After the settings: the definitions read them when loaded.
    from statepool_dagster.core.runs.files import fingerprint_run
    from statepool_dagster.definitions import defs

    definitions = defs() if callable(defs) else defs  # a Definitions object in older trees
    sensor = definitions.get_sensor_def("runs_sensor")
    with instance_for_test(temp_dir=str(root / "home")) as instance:
        names = [f"r{i:05d}" for i in range(unchanged)]
        instance.add_dynamic_partitions("runs", names)
        for name in names:
            digest = fingerprint_run(make(runs, name)).digest
            instance.report_runless_asset_event(
                AssetMaterialization(
                    "curator_prompts", partition=name, metadata={"source_fingerprint": digest}
                )
            )

        def tick() -> tuple[float, int]:
            with build_sensor_context(
                instance=instance, definitions=definitions, resources=definitions.resources
            ) as context:
                started = time.perf_counter()
                result = sensor(context)
                return time.perf_counter() - started, len(result.run_requests or [])

        cold, _ = tick()
        warm, requested = tick()
        for i in range(new):
            make(runs, f"n{i:05d}")
        with_new, requested_new = tick()
    figures = dict(
        unchanged_cold_s=cold,
        unchanged_s=warm,
        unchanged_requests=requested,
        new_s=with_new,
        new_requests=requested_new,
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
