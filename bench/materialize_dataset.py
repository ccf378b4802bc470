"""Materialize ``training_dataset`` through Dagster, on the real code location's definitions.

python bench/materialize_dataset.py   (DAGSTER_HOME and STATEPOOL_* name the instance and store)

The implicit asset job run in process, as ``statepool demo`` launches it, so the figure
is the materialization's and not a command's start-up. ``dg launch --assets
training_dataset`` does the same from the shell (in ``.venv``; not in a venv with the
trainer extra, whose Hydra pins an older ANTLR runtime than Dagster's selection parser needs).
"""

from __future__ import annotations

import sys

from dagster import AssetKey, DagsterInstance

from statepool_dagster.definitions import defs


def main() -> int:
    definitions = defs() if callable(defs) else defs  # a Definitions object in older trees
    job = definitions.resolve_implicit_global_asset_job_def()
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[AssetKey("training_dataset")],
            run_config=quiet,
            raise_on_error=False,
        )
    if not result.success:
        print("training_dataset failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
