"""The documentation builds strict, and its code runs as written.

The site (mkdocs.yml, docs/) is built with ``mkdocs build --strict``: a broken link, a bad
anchor or a page missing from the navigation fails. Every ```bash and ```python block of
README.md and of every page under docs/ is run, README first and then the pages in the
site's order, in one fresh folder where ``statepool demo`` has just run (what ``make demo``
does), with the venv activated. A block preceded by ``<!-- not run: reason -->`` is skipped;
fences without a language (output, layouts) are never run. A ```text block preceded by
``<!-- output of the block above -->`` states what the block before it prints: each of its
lines must appear in that block's output (``…`` standing for any text), so the numbers
the docs state are the ones the commands write.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from statepool_dagster.cli.main import build_parser
from statepool_dagster.core.config import Settings

from process_helpers import REPO

DOCS = REPO / "docs"
FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->$")
OUTPUT = "<!-- output of the block above -->"
RUNNERS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
VENV = Path(sys.executable).parent.parent
# Written by the bench (tables); shown inside performance.md, never run.
BENCH_TABLES = DOCS / "performance"


def nav_pages(nav: list) -> list[str]:
    """The pages of mkdocs.yml's ``nav``, in the site's order."""
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


CONFIG = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
PAGES = [DOCS / page for page in nav_pages(CONFIG["nav"])]
FILES = [REPO / "README.md", *PAGES]


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts, its language, its code."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the reason given by a preceding <!-- not run: ... -->
    output: str | None = None  # what the block prints, as the page states it

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUNNERS and self.not_run is None


def page_blocks(path: Path) -> list[Block]:
    """Every fenced block, with the opt-out comment on the nearest non-blank line above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
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
        reason = note.group("reason") if note else None
        if above == OUTPUT:
            assert blocks and match.group(1) == "text", f"{path}:{i + 1}: output of what?"
            blocks[-1] = dataclasses.replace(blocks[-1], output=code)
        else:
            blocks.append(Block(path, i + 1, match.group(1), code, reason))
        i = end + 1
    return blocks


BLOCKS = [block for path in FILES for block in page_blocks(path)]
RUNNABLE = [b for b in BLOCKS if b.runs]


def test_every_page_is_in_the_navigation():
    pages = {p for p in DOCS.rglob("*.md") if not p.is_relative_to(BENCH_TABLES)}
    assert pages == set(PAGES)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_the_not_run_convention_holds(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = page_blocks(path)
    marked = {b.line for b in blocks if b.not_run}
    for n, line in enumerate(lines, 1):
        if not line.strip().startswith("<!-- not run"):
            continue
        assert NOT_RUN.match(line.strip()), f"{path.name} line {n}: give a reason"
        following = next(b for b in blocks if b.line > n)
        assert following.line in marked, f"{path.name} line {n}: not just before a fence"


def test_enough_blocks_run():
    # the quick start's, the readers, the trainer's, export, score, compute_score, and the
    # sessions' and feedback's examples on the demo's store
    assert len(RUNNABLE) >= 18
    assert sum(1 for b in RUNNABLE if b.output) >= 2, "blocks whose output the page states"


def test_the_readme_is_a_landing_page_with_a_two_command_quick_start():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [first, *_] = [b for b in page_blocks(REPO / "README.md") if b.code in quick_start]
    commands = [line for line in first.code.splitlines() if line.strip()]
    assert [c.split("#")[0].strip() for c in commands] == ["make demo", "make test"]


def test_the_readme_links_to_files_that_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert targets
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, missing


def test_every_make_target_the_docs_name_exists():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    command = re.compile(r"(?:`|^)make ([a-z][\w-]*)", re.M)  # in code, not prose
    named = {t for path in FILES for t in command.findall(path.read_text(encoding="utf-8"))}
    assert {"demo", "test", "dev", "docs", "validate", "test-fast"} <= named
    assert named <= targets, named - targets


def test_the_quick_start_is_what_make_demo_runs():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "\tstatepool demo" in makefile.replace("$(BIN)/", "")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as ``make docs`` builds it (strict), into a temp folder."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(VENV / "bin" / "mkdocs"), "build", "--strict", "-d", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_site_builds_strict_with_every_page(site: Path):
    for page in PAGES:
        rel = page.relative_to(DOCS).with_suffix("")
        built = site / ("index.html" if rel.name == "index" else rel / "index.html")
        assert built.is_file(), rel
    assert (site / "ui-asset-graph.png").is_file()


def test_the_settings_page_lists_every_setting(site: Path):
    page = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"<code>{Settings.env_name(name)}</code>" in page


def test_the_command_line_page_lists_every_command_and_flag(site: Path):
    page = (site / "reference" / "command-line" / "index.html").read_text(encoding="utf-8")
    [sub] = [a for a in build_parser()._actions if a.dest == "command"]
    for name, command in sub.choices.items():
        assert f'id="statepool-{name}"' in page
        for action in command._actions:
            if action.help != "==SUPPRESS==" and action.dest != "help":
                for flag in action.option_strings:
                    assert f"<code>{flag}</code>" in page, (name, flag)


def test_the_generated_parts_of_the_pages_are_current():
    """Committed, so a page reads whole on the repository: ``make docs-generated`` rewrites."""
    stale = _hooks().stale_pages()
    assert not stale, f"not current (make docs-generated): {[str(p) for p in stale]}"


def test_a_generated_table_cell_escapes_what_html_would_swallow():
    cell = _hooks()._cell("default <store>/feedback, `<host>-<pid>` & a|b")
    assert cell == "default &lt;store&gt;/feedback, `<host>-<pid>` &amp; a\\|b"


@pytest.mark.parametrize(
    ("page", "text"),
    [
        ("reference/settings", "default to <store>/feedback"),
        ("reference/command-line", "writer name (default ingest-<host>-<pid>)"),
        ("reference/command-line", "else <store>/feedback)"),
    ],
)
def test_the_built_site_shows_the_generated_text_whole(site: Path, page: str, text: str):
    built = (site / page / "index.html").read_text(encoding="utf-8")
    assert text in html.unescape(re.sub(r"<[^>]+>", "", built)), text


def test_the_built_performance_page_holds_the_bench_tables(site: Path):
    built = html.unescape((site / "performance" / "index.html").read_text(encoding="utf-8"))
    first = next(
        line
        for line in (DOCS / "performance" / "reference.md").read_text("utf-8").splitlines()
        if line.startswith("|") and "---" not in line
    )
    cells = [c.strip().strip("`") for c in first.strip("|").split("|") if c.strip()]
    assert all(cell in built for cell in cells[:3]), cells


def test_the_blocks_write_exports_to_a_temporary_folder_or_the_store():
    """A reader following the pages leaves no new folder in the repository: an ``--out`` is
    a temporary folder (``mktemp``, ``$scratch``) or inside the git-ignored ``store/``."""
    for block in RUNNABLE:
        for out in re.findall(r"--out\s+(\S+)", block.code):
            assert out.startswith(('"$(mktemp', '"$scratch', "store/")), (block.name, out)


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", REPO / "tools/mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree_paths(tree: str, name_width: int) -> set[str]:
    """The module paths a generated tree names, read back from its indentation."""
    found, folders = set(), []
    for line in tree.splitlines()[2:-1]:  # inside the fence, under the package's own line
        indent = len(line) - len(line.lstrip(" "))
        if indent >= name_width - 2:
            continue  # a wrapped description's next line
        depth = indent // 2
        name = line.split()[0]
        folders = folders[: depth - 1]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
            found.add("/".join([*folders, "__init__.py"]))
        else:
            found.add("/".join([*folders, name]))
    return found


def test_the_layout_page_names_every_module(site: Path):
    package = REPO / "statepool_dagster"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    hooks = _hooks()
    tree = hooks.package_layout()
    assert tree_paths(tree, hooks.NAME_WIDTH) == modules - {"__init__.py"}
    for init in package.rglob("__init__.py"):  # a folder says what it holds, not its name
        line = hooks.docstring_line(init)
        assert line and line.rstrip(".") != init.parent.relative_to(package).as_posix(), init
    page = html.unescape((site / "reference" / "layout" / "index.html").read_text("utf-8"))
    assert "ticks.py" in page and "generated: layout" not in page
    assert hooks.docstring_line(package / "storages" / "sqlite.py") in page


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh folder as a clone has it after ``make demo``, and the user's environment."""
    root = tmp_path_factory.mktemp("docs_blocks")
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


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_block_runs_as_written(block: Block, demo_folder):
    root, env = demo_folder
    if RUNNERS[block.lang] == "bash":
        args = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        args = [sys.executable, "-c", block.code]
    done = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"{block.name} ({block.lang}) failed with {done.returncode}:\n"
        f"{block.code}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-4000:]}"
    )
    for line in (block.output or "").splitlines():
        pattern = ".*?".join(re.escape(part) for part in line.split("…"))
        assert re.search(pattern, done.stdout + done.stderr), (
            f"{block.name} states {line!r}; it printed:\n{done.stdout}\n{done.stderr}"
        )
