"""Materialize ``training_dataset`` through Dagster, on the real code location's definitions.

python bench/materialize_dataset.py   (DAGSTER_HOME and STATEPOOL_* name the instance and store)

The implicit asset job run in process, as ``statepool demo`` launches it. Not
``dagster asset materialize --select``: its selection parser needs the ANTLR runtime
Dagster was generated with, and the trainer extra (hydra) pins an older one.
"""

from __future__ import annotations

import sys

from dagster import AssetKey, DagsterInstance

from statepool_dagster.definitions import defs


def main() -> int:
    job = defs.resolve_implicit_global_asset_job_def()
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
