"""The README's code runs as written.

Every ```bash and ```python block of README.md is run, in README order, in a fresh folder
where ``statepool demo`` has just run (what ``make demo`` does), with the venv activated.
A block preceded by ``<!-- not run: reason -->`` is skipped; fences without a language
(output, layouts) are never run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO

README = REPO / "README.md"
FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->$")
RUNNERS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
VENV = Path(sys.executable).parent.parent


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: where it starts, its language, its code."""

    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the reason given by a preceding <!-- not run: ... -->

    @property
    def runs(self) -> bool:
        return self.lang in RUNNERS and self.not_run is None


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block, with the opt-out comment on the nearest non-blank line above it."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        note = NOT_RUN.match(above)
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(i + 1, match.group(1), code, note.group("reason") if note else None))
        i = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b.runs]


def test_the_convention_holds_for_every_block():
    lines = README.read_text(encoding="utf-8").splitlines()
    markers = [n + 1 for n, line in enumerate(lines) if line.strip().startswith("<!-- not run")]
    marked = {b.line for b in BLOCKS if b.not_run}
    for n in markers:
        assert NOT_RUN.match(lines[n - 1].strip()), f"README line {n}: give a reason"
        following = next(b for b in BLOCKS if b.line > n)
        assert following.line in marked, f"README line {n}: not just before a fence"
    assert len(RUNNABLE) >= 4  # the quick start's, the compat import, the trainer's, export


def test_the_quick_start_is_what_make_demo_runs():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "\tstatepool demo" in makefile.replace("$(BIN)/", "")


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh folder as a clone has it after ``make demo``, and the user's environment."""
    root = tmp_path_factory.mktemp("readme")
    for name in ("dagster.yaml", "workspace.yaml"):
        shutil.copy(REPO / name, root / name)
    (root / ".venv").symlink_to(VENV)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        PATH=f"{root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(root / ".venv"),
        HF_HOME=str(root / ".hf_home"),
        HF_DATASETS_OFFLINE="1",
    )
    done = subprocess.run(
        [str(VENV / "bin" / "statepool"), "demo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return root, env


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"line{b.line}-{b.lang}" for b in RUNNABLE])
def test_readme_block_runs_as_written(block: Block, demo_folder):
    root, env = demo_folder
    if RUNNERS[block.lang] == "bash":
        args = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        args = [sys.executable, "-c", block.code]
    done = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"README.md line {block.line} ({block.lang}) failed with {done.returncode}:\n"
        f"{block.code}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-4000:]}"
    )
