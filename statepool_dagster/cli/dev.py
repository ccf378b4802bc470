"""``make dev``: ``dagster dev`` for this code location, without two warnings that mislead here.

- "Found a dagster instance configuration value (dagster.yaml) in the current folder ...
  will not be used": ``DAGSTER_HOME/dagster.yaml`` is a link to that very file (the
  Makefile makes it), so it is used. The message is dropped only when both are one file.
- "dev_command is superseded ... Use 'dg dev' instead": ``dg dev`` (the separate
  ``dagster-dg-cli`` package) serves dg projects and workspaces (``[tool.dg]`` in
  pyproject.toml or a ``dg.toml``), not a ``workspace.yaml`` with an instance home; for this
  layout ``dagster dev`` is the command that serves the code location, webserver and daemon.

Every other message of ``dagster dev`` is shown as it is.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

UNUSED_CONFIG = "will not be used to configure Dagster"
SUPERSEDED = r".*is superseded and its usage is discouraged\. Use 'dg dev' instead\."


def same_config_file(cwd: Path | None = None) -> bool:
    """Whether ``./dagster.yaml`` is the file ``DAGSTER_HOME/dagster.yaml`` points to."""
    home = os.environ.get("DAGSTER_HOME")
    here = (cwd or Path.cwd()) / "dagster.yaml"
    if not home or not here.is_file():
        return False
    return (Path(home) / "dagster.yaml").resolve() == here.resolve()


class _UsedConfigFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (UNUSED_CONFIG in record.getMessage() and same_config_file())


def main(argv: list[str] | None = None) -> int:
    """``dagster dev`` with ``argv`` (default: this process's arguments)."""
    from dagster._cli import main as dagster_main

    warnings.filterwarnings("ignore", message=SUPERSEDED, category=FutureWarning)
    logging.getLogger("dagster").addFilter(_UsedConfigFilter())
    sys.argv = ["dagster", "dev", *(sys.argv[1:] if argv is None else argv)]
    return dagster_main()


if __name__ == "__main__":
    sys.exit(main())
