"""Both sides timed: the original script and ``statepool sync``, their outputs compared."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEED = Path(os.environ.get("STATEPOOL_SEED", REPO.parent / "shared/reference/statepool_seed.py"))
# The original as its users run it: a script under the system's Python.
SEED_PYTHON = os.environ.get("STATEPOOL_SEED_PYTHON", "python3")


@dataclass
class Row:
    case: str
    result: str
    wall: float = 0.0
    rss_mb: float = 0.0
    seed_wall: float = 0.0
    seed_rss_mb: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class Measured:
    rc: int
    wall: float
    rss_mb: float
    stdout: str
    stderr: str


def timed(argv: list[str], env: dict[str, str] | None = None) -> Measured:
    """Run argv under /usr/bin/time -v: exit code, wall seconds, max RSS in MB."""
    with open(os.devnull, "wb") as _:
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-v", *argv], env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - started
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    rss = int(m.group(1)) / 1024 if m else float("nan")
    return Measured(done.returncode, wall, rss, done.stdout, done.stderr)


def run_seed(runs: Path, out: Path) -> Measured:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return timed([SEED_PYTHON, str(SEED), str(runs), str(out)])


class Pipeline:
    """One DAGSTER_HOME and store, synced as often as a case asks."""

    def __init__(self, work: Path, runs: Path):
        self.home, self.store = work / "home", work / "store"
        for path in (self.home, self.store):
            shutil.rmtree(path, ignore_errors=True)
        self.home.mkdir(parents=True)
        shutil.copy(REPO / "dagster.yaml", self.home / "dagster.yaml")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
        env.update(
            DAGSTER_HOME=str(self.home),
            STATEPOOL_RUNS_DIR=str(runs),
            STATEPOOL_STORE_DIR=str(self.store),
            PYTHONPATH=str(REPO),
        )
        self.env = env

    def sync(self) -> Measured:
        return timed([sys.executable, "-m", "statepool_dagster.cli", "sync", "--json"], self.env)

    def states(self) -> dict[str, Path]:
        pool = self.store / "state_pool"
        if not pool.is_dir():
            return {}
        return {p.name: p for p in pool.glob("*/*.json")}

    def part_files(self) -> dict[str, int]:
        """Parquet parts per table folder (asset/run)."""
        counts: dict[str, int] = {}
        for p in self.store.glob("*/*/*.parquet"):
            key = f"{p.parent.parent.name}/{p.parent.name}"
            counts[key] = counts.get(key, 0) + 1
        return counts


def compare(
    seed_out: Path, ours: dict[str, Path], expect_missing: set[str] = frozenset()
) -> list[str]:
    """Differences between the original's state files and ours (names, then bytes)."""
    theirs = {p.name: p for p in seed_out.glob("*.json")}
    problems = []
    only_theirs = sorted(set(theirs) - set(ours) - expect_missing)
    only_ours = sorted(set(ours) - set(theirs))
    if only_theirs:
        problems.append(f"{len(only_theirs)} only in the original: {only_theirs[:5]}")
    if only_ours:
        problems.append(f"{len(only_ours)} only in ours: {only_ours[:5]}")
    differ = []
    for name in sorted(set(theirs) & set(ours)):
        a, b = theirs[name], ours[name]
        if a.stat().st_size != b.stat().st_size or a.read_bytes() != b.read_bytes():
            differ.append(name)
    if differ:
        problems.append(f"{len(differ)} differ: {differ[:5]}")
    return problems


def sync_problems(m: Measured) -> list[str]:
    """A sync that did not exit 0 or reported a failed run."""
    problems = []
    if m.rc != 0:
        problems.append(f"exit {m.rc}: {m.stderr.strip()[-600:]}")
    try:
        summary = json.loads(m.stdout)
    except ValueError:
        return [*problems, f"no JSON summary: {m.stdout[-300:]!r}"]
    if summary.get("failed"):
        errs = [r.get("error") for r in summary.get("runs", []) if not r.get("success")]
        problems.append(f"{summary['failed']} failed runs: {str(errs)[:600]}")
    if "Traceback" in m.stderr:
        problems.append("traceback on stderr: " + m.stderr[m.stderr.find("Traceback") :][:600])
    return problems


def rejects_summary(m: Measured) -> str:
    try:
        summary = json.loads(m.stdout)
    except ValueError:
        return ""
    rej = sum(r.get("rejects", 0) for r in summary.get("runs", []))
    ign = sum(r.get("ignored", 0) for r in summary.get("runs", []))
    return f"rejects={rej} ignored={ign}" if rej or ign else ""


def one_shot(
    name: str, work: Path, build: Callable[[Path], None], expect_ignored: bool = False
) -> list[Row]:
    """Build the runs, run the original and one sync, compare."""
    shutil.rmtree(work, ignore_errors=True)
    runs = work / "runs"
    runs.mkdir(parents=True)
    t0 = time.perf_counter()
    build(runs)
    gen = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in runs.rglob("*") if p.is_file()) / 1e6
    seed = run_seed(runs, work / "seed_out")
    pipe = Pipeline(work, runs)
    ours = pipe.sync()
    problems = sync_problems(ours)
    if seed.rc != 0:
        problems.append(f"original exit {seed.rc}: {seed.stderr.strip()[-300:]}")
    diffs = compare(work / "seed_out", pipe.states())
    result = "crash" if ours.rc != 0 else ("DIFF" if diffs or problems else "match")
    row = Row(name, result, ours.wall, ours.rss_mb, seed.wall, seed.rss_mb)
    row.notes.append(f"input {size:.0f} MB, generated in {gen:.0f} s, {len(pipe.states())} states")
    parts = pipe.part_files()
    if parts:
        row.notes.append(f"max parts per table folder: {max(parts.values())}")
    if note := rejects_summary(ours):
        row.notes.append(note)
    row.notes += problems + diffs
    shutil.rmtree(work / "seed_out", ignore_errors=True)
    shutil.rmtree(pipe.store, ignore_errors=True)
    return [row]
