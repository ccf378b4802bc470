"""The fair peer: what a user writes by hand for a training set, without this project.

    python bench/fair_peer.py RUNS_DIR OUT_DIR     prints the states written

The original script's ``collect_from_run`` over every run (its own code, loaded from
``../shared/reference/statepool_seed.py``), then each state's curator prompt rendered (the
original's ``build_curator_prompt`` needs the inference side's modules, which are not
published: the bundled renderer stands in, byte-identical under the same spec), then one
Parquet file of state ids, prompts and states written by pandas.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import sys
from pathlib import Path

import pandas as pd

from statepool_dagster.core.prompts.render import build_curator_prompt
from statepool_dagster.core.prompts.spec import default_prompt_spec

SEED = Path(__file__).resolve().parents[2] / "shared" / "reference" / "statepool_seed.py"


def main() -> int:
    runs, out = sys.argv[1], Path(sys.argv[2])
    spec = importlib.util.spec_from_file_location("statepool_seed", SEED)
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    pool = out / "state_pool"
    for run in sorted(glob.glob(os.path.join(runs, "*"))):
        if os.path.isfile(os.path.join(run, "episodes.jsonl")):
            seed.collect_from_run(run, str(pool))
    prompt_spec = default_prompt_spec()
    rows = []
    for path in sorted(glob.glob(str(pool / "*.json"))):
        text = Path(path).read_text()
        state = seed.CheckpointState(**json.loads(text))
        rows.append(
            {
                "state_id": state.state_id,
                "prompt": build_curator_prompt(state, prompt_spec),
                "state": text,
            }
        )
    pd.DataFrame(rows).to_parquet(out / "train.parquet")
    print(len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
