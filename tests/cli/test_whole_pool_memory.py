"""The whole-pool commands read the store a batch at a time: their peak memory does not grow
with the number of states (``statepool export`` held 1.5 GB for 3,800 small states, and
``statepool report`` 0.9 GB, when each held the pool)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.stages import build_run
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

from cli_helpers import cli_env, peak_rss_mb, statepool

pytestmark = pytest.mark.slow  # memory measured in subprocesses at several pool sizes

# States of about 24 KB (state and prompt), as in the bench's wide shape.
SHAPE = dict(n_checkpoints=20, n_cards=30, emb_dim=64, episodes_per_batch=8)
STATEPOOL = Path(sys.executable).with_name("statepool")


def _store(root: Path, n_runs: int) -> SimpleNamespace:
    runs, store = root / "runs", root / "store"
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for i in range(n_runs):
        build_run(settings, generate_run(runs / f"run{i:03d}", SampleSpec(**SHAPE), i).name)
    return SimpleNamespace(runs=runs, store=store)


@pytest.fixture(scope="module")
def pools(tmp_path_factory) -> dict[int, SimpleNamespace]:
    """A pool of 300 states and one of 1,200 (15 and 60 runs)."""
    root = tmp_path_factory.mktemp("pools")
    return {n: _store(root / f"pool{n}", n) for n in (15, 60)}


# Python objects (tracemalloc) and Arrow buffers (its pool's peak) of one command, run in a
# fresh process: the resident size would mostly measure the allocators' own retention.
PYTHON_AND_ARROW = """
import sys, tracemalloc
import pyarrow as pa
from statepool_dagster.core.export import write
from statepool_dagster.core.export.write import stream_export
from statepool_dagster.core.report import write_report

what, store, out = sys.argv[1:]
write.ROW_GROUP_BYTES = 1 << 20  # a row group's buffer, small beside the pool's growth
pa.array(["warm"])  # pyarrow's first array loads what it loads once
tracemalloc.start()
if what == "report":
    write_report(store)
else:
    stream_export(store, {what: out})
python = tracemalloc.get_traced_memory()[1]
print(python + pa.default_memory_pool().max_memory())
"""


def held_mb(what: str, store: Path, out: Path) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_AND_ARROW, what, str(store), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return int(done.stdout) / 2**20


@pytest.mark.parametrize("what", ["verl", "trl", "pool", "report"])
def test_export_and_report_memory_does_not_grow_with_the_states(pools, tmp_path, what):
    held = {n: held_mb(what, pool.store, tmp_path / f"out{n}") for n, pool in pools.items()}
    # 900 more states of ~24 KB: holding them would add over 20 MB (their text alone).
    assert held[60] - held[15] < 8, held


def test_export_command_peak_rss_stays_flat(pools, tmp_path):
    """The command as a user runs it: resident memory, 4x the states."""
    peaks = {}
    for n, pool in pools.items():
        env = cli_env(pool, tmp_path / f"home{n}")
        peaks[n] = peak_rss_mb(
            env, tmp_path, "export", "--format", "verl", "--out", str(tmp_path / f"v{n}")
        )
    # The whole pool held grew by ~150 MB here.
    assert peaks[60] - peaks[15] < 40, peaks


def test_status_memory_does_not_grow_with_the_states(tmp_path):
    """``statepool status`` answers from the instance's index, never the runs' tables."""
    peaks = {}
    for checkpoints in (3, 12):
        root = tmp_path / f"c{checkpoints}"
        spec = SampleSpec(n_checkpoints=checkpoints, n_cards=30, emb_dim=64)
        for i in range(2):
            generate_run(root / "runs" / f"run{i:03d}", spec, i)
        workspace = SimpleNamespace(runs=root / "runs", store=root / "store")
        env = cli_env(workspace, root / "home")
        statepool(env, tmp_path, "sync", "-q")
        peaks[checkpoints] = peak_rss_mb(env, tmp_path, "status")
    assert peaks[12] - peaks[3] < 10, peaks
