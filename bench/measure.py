"""How the bench measures: every figure is a child process, timed from outside.

A measure's wall time is the child's, from start to exit; its peak RSS is ``ru_maxrss``
of the child and its own children (``os.wait4``). The code measured is whichever checkout
``Bench.code`` names: it goes first on ``PYTHONPATH`` of every command, and the installed
``statepool`` script imports ``statepool_dagster`` from there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BIN = Path(sys.executable).parent
# What every measured command loads first; the same module names in every layout so far.
WARM_IMPORTS = "import statepool_dagster.definitions, statepool_dagster.cli, pyarrow.parquet"


# Where a sitting's earlier outputs go instead of being deleted. On ext4 without a journal
# (this machine's disk) a new file skips every inode freed in the last one to five minutes,
# reading the inode table to find out: right after a store of 15,000 files was deleted a
# file costs 200-650 µs to create instead of about 50 µs, and a timed command that writes
# thousands of files pays it in proportion to what it writes. The outputs of a sitting are
# deleted at the start of the next one, which then waits for the window to close.
TRASH = ".trash"
RECENTLY_FREED_SECONDS = 300  # ext4's RECENTCY_DIRTY (fs/ext4/ialloc.c)


def empty_trash(out: Path, wait_above: int = 1000) -> int:
    """Delete the outputs an earlier sitting moved aside under ``out``; when they were more
    than ``wait_above`` files, wait until ext4 reuses their inodes freely again. The files
    deleted."""
    trash = out / TRASH
    if not trash.is_dir():
        return 0
    files = sum(len(names) + len(dirs) for _, dirs, names in os.walk(trash))
    shutil.rmtree(trash, ignore_errors=True)
    if files > wait_above:
        print(
            f"deleted {files:,} files of an earlier sitting: waiting "
            f"{RECENTLY_FREED_SECONDS} s until new files no longer pay for them",
            file=sys.stderr,
        )
        time.sleep(RECENTLY_FREED_SECONDS)
    return files


@dataclass
class Measure:
    name: str
    seconds: float
    peak_rss_mb: float
    stdout: str = field(default="", repr=False, compare=False)
    cpu_seconds: float = 0.0  # user + system, the child's and its waited-for children's


def median_of(repeat: int, measure: Callable[[], Measure]) -> Measure:
    """The median wall time of ``repeat`` runs of ``measure``; peak RSS: the largest seen."""
    runs = sorted((measure() for _ in range(max(1, repeat))), key=lambda m: m.seconds)
    middle = runs[len(runs) // 2]
    cpu = sorted(m.cpu_seconds for m in runs)[len(runs) // 2]
    peak = max(m.peak_rss_mb for m in runs)
    return Measure(middle.name, middle.seconds, peak, middle.stdout, cpu)


def warm_page_cache(folder: Path) -> None:
    """Read every input file once before a timed command, so each starts from a warm cache.

    These machines reclaim idle page cache within minutes; a cold read of the corpus
    costs seconds and would land on whichever measure came first.
    """
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 22):
                    pass


def input_mb(runs: Path) -> float:
    return sum(p.stat().st_size for p in runs.rglob("*") if p.is_file()) / 1e6


def last_json(stdout: str) -> object:
    """The JSON a bench program prints as its last line."""
    return json.loads(stdout.strip().splitlines()[-1])


@dataclass
class Bench:
    """Where a bench run writes, which checkout it measures, and on which storages."""

    out: Path
    code: Path = REPO
    postgres: str | None = None
    databases: list[str] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a measured command: ours, minus any statepool or Dagster setting
        and the wish to write no bytecode."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
        # Bytecode cached, as an installed package has it: the warm-up writes it for the
        # checkout measured, so no measured command compiles its modules again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPATH"] = str(self.code)
        env.update(extra)
        return env

    def fresh_env(self, name: str, runs: Path, postgres: bool = False) -> dict[str, str]:
        """A new DAGSTER_HOME and store for ``runs``; on PostgreSQL, a new database too."""
        home, store = self.out / f"{name}_home", self.out / f"{name}_store"
        for path in (home, store):
            self.discard(path)
        home.mkdir(parents=True)
        extra = {}
        if postgres:
            if not self.postgres:
                raise SystemExit("no --postgres URL given")
            config = self.code / "deploy" / "postgres" / "dagster.yaml"
            extra["DAGSTER_PG_URL"] = self.new_database(f"bench_{name}")
        else:
            config = self.code / "dagster.yaml"
        shutil.copy(config, home / "dagster.yaml")
        return (
            self.env(
                DAGSTER_HOME=str(home), STATEPOOL_RUNS_DIR=str(runs), STATEPOOL_STORE_DIR=str(store)
            )
            | extra
        )

    def discard(self, path: Path) -> None:
        """Move ``path`` (a command's earlier output) aside, into ``out/.trash``: never deleted
        during a sitting (:func:`empty_trash`)."""
        if path.exists() or path.is_symlink():
            trash = self.out / TRASH
            trash.mkdir(parents=True, exist_ok=True)
            path.rename(trash / f"{time.time_ns()}-{path.name}")

    def new_database(self, name: str) -> str:
        """An empty database on the --postgres server; its URL."""
        assert self.postgres
        self.admin(f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        parts = urlsplit(self.postgres)
        return urlunsplit(parts._replace(path="/" + name))

    def drop_databases(self) -> None:
        if self.databases:
            self.admin(*(f'DROP DATABASE IF EXISTS "{name}"' for name in self.databases))
            self.databases.clear()

    def admin(self, *statements: str) -> None:
        """Statements outside a transaction (as CREATE and DROP DATABASE must be)."""
        import psycopg2

        conn = psycopg2.connect(self.postgres)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def run(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        inputs: Path | None = None,
    ) -> Measure:
        """Run a command; its wall time, peak RSS (with its children) and what it printed.

        ``inputs`` (default: the env's runs folder) is read first, untimed.
        """
        env = env or self.env()
        if inputs is None and "STATEPOOL_RUNS_DIR" in env:
            inputs = Path(env["STATEPOOL_RUNS_DIR"])
        if inputs is not None:
            warm_page_cache(inputs)
        # The interpreter's packages are files too: load them once so they are in the cache;
        # the checkout's modules compiled, as installing a package compiles them.
        package = str(self.code / "statepool_dagster")
        warm = [sys.executable, "-c", f"{WARM_IMPORTS}; import compileall; "
                f"compileall.compile_dir({package!r}, quiet=1)"]  # fmt: skip
        subprocess.run(warm, env=env, check=True, capture_output=True, cwd=self.code)
        # Files, not pipes: they never fill up.
        with tempfile.TemporaryFile() as output, tempfile.TemporaryFile() as errors:
            started = time.perf_counter()
            # From the measured checkout: a tool that puts its working folder on sys.path
            # (dagster -m) then loads the same code as PYTHONPATH names.
            proc = subprocess.Popen(argv, env=env, stdout=output, stderr=errors, cwd=self.code)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - started
            if os.waitstatus_to_exitcode(status) != 0:
                errors.seek(0)
                raise SystemExit(f"{name} failed: {errors.read().decode(errors='replace')[-3000:]}")
            output.seek(0)
            stdout = output.read().decode(errors="replace")
        cpu = usage.ru_utime + usage.ru_stime
        return Measure(name, seconds, usage.ru_maxrss / 1024, stdout, cpu)

    def program(self, name: str, script: str, *args: object, env: dict[str, str] | None = None):
        """Run one of the bench's own programs (``bench/<script>.py``) as a measure."""
        argv = [sys.executable, str(BENCH / f"{script}.py"), *map(str, args)]
        return self.run(name, argv, env)


def statepool(*args: str) -> list[str]:
    """The installed ``statepool`` command; PYTHONPATH decides whose code it runs."""
    return [str(BIN / "statepool"), *args]


def step_seconds(bench: Bench, env: dict[str, str], run: str) -> float:
    """Step time per partition of the latest Dagster run that covered ``run`` (step_stats.py)."""
    argv = [sys.executable, str(BENCH / "step_stats.py"), run]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=bench.code)
    if done.returncode:
        raise SystemExit(f"step stats failed: {done.stderr[-3000:]}")
    seconds = last_json(done.stdout)
    if seconds is None:
        raise SystemExit(f"step stats: no recent Dagster run covered {run}")
    return float(seconds)
