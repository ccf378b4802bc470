"""The project's ``.env`` line that sends Dagster's own commands to the instance ``statepool`` uses.

``dg dev``, ``dg launch`` and every ``dagster`` command load ``.env`` from the folder they
run in, before they open an instance; without ``DAGSTER_HOME`` they would open a temporary
one (``.tmp_dagster_home_*``) that knows none of the runs. The line names the instance home
absolutely (Dagster requires it) and lets a ``DAGSTER_HOME`` set in the environment win:
``DAGSTER_HOME="${DAGSTER_HOME:-/abs/.dagster_home}"``. The Makefile writes it (``make
install``); a ``DAGSTER_HOME`` line of the user's own is left alone.

Usage: ``python -m statepool_dagster.cli.dg_home HOME [PROJECT]`` (PROJECT: the current folder).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ENV_FILE = ".env"
COMMENT = "# Written by statepool: Dagster's commands (dg dev, dg launch) open its instance."
_OURS = re.compile(r'^DAGSTER_HOME="\$\{DAGSTER_HOME:-.*\}"$')
_ANY = re.compile(r"^\s*(export\s+)?DAGSTER_HOME\s*=")


def env_line(home: Path) -> str:
    """The ``.env`` line for instance home ``home`` (made absolute)."""
    return f'DAGSTER_HOME="${{DAGSTER_HOME:-{Path(home).resolve()}}}"'


def is_dg_project(folder: Path) -> bool:
    """True when ``folder`` holds a ``pyproject.toml`` with a ``[tool.dg]`` table."""
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r"^\[tool\.dg[.\]]", text, re.M) is not None


def write_dg_env(project: Path, home: Path) -> bool:
    """Point ``project/.env``'s ``DAGSTER_HOME`` at ``home``; True when the file changed.

    Other lines are kept. A ``DAGSTER_HOME`` line not written here is the user's choice and
    stays; one written here for another home (the folder moved) is replaced.
    """
    path = Path(project) / ENV_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    if any(_ANY.match(line) and not _OURS.match(line) for line in lines):
        return False
    wanted = [COMMENT, env_line(home)]
    kept = [line for line in lines if line != COMMENT and not _OURS.match(line)]
    if lines[-2:] == wanted and len(kept) == len(lines) - 2:
        return False
    path.write_text("\n".join([*kept, *wanted]) + "\n", encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    project = Path(argv[1]) if len(argv) == 2 else Path.cwd()
    if not is_dg_project(project):
        print(f"dg_home: {project} has no pyproject.toml with [tool.dg]", file=sys.stderr)
        return 2
    if write_dg_env(project, Path(argv[0])):
        print(f"{project / ENV_FILE}: DAGSTER_HOME defaults to {Path(argv[0]).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
