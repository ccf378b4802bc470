"""``python -m statepool_dagster.cli``: the same as ``statepool``."""

import sys

from .main import main

sys.exit(main())
