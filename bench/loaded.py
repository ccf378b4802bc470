"""What a process loads before any work, and nothing else: the bench's fixed costs.

python bench/loaded.py            dagster, pyarrow.parquet, statepool_dagster.definitions
python bench/loaded.py --parquet  pyarrow.parquet alone
"""

from __future__ import annotations

import importlib
import sys

SYNC_IMPORTS = ("dagster", "pyarrow.parquet", "statepool_dagster.definitions")


def main() -> int:
    for module in ("pyarrow.parquet",) if "--parquet" in sys.argv[1:] else SYNC_IMPORTS:
        importlib.import_module(module)
    return 0


if __name__ == "__main__":
    sys.exit(main())
