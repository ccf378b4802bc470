"""A build holds one checkpoint at a time: its memory does not grow with the run."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections import Counter
from itertools import chain
from pathlib import Path

import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, RUN_ASSETS, SNAPSHOTS, STATES
from statepool_dagster.core.report import run_numbers
from statepool_dagster.core.runs.files import fingerprint_run
from statepool_dagster.core.stages import OpenTables, build_run, build_stages
from statepool_dagster.core.stages.episodes import build_episodes
from statepool_dagster.core.stages.prompts import RenderedPrompts
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.rows import load_arrow
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

pytestmark = pytest.mark.slow  # memory measured in subprocesses and at several sizes


def _input_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in run.rglob("*") if p.is_file())


def _stage_peaks(
    tmp_path: Path, checkpoints: int, hand_over: bool = False
) -> tuple[dict[str, int], int]:
    """Each stage's peak, the four in one step (``hand_over``) or the prompts stage alone."""
    spec = SampleSpec(
        n_runs=1, n_checkpoints=checkpoints, n_cards=40, emb_dim=64, episodes_per_batch=32
    )
    run = generate_run(tmp_path / "runs" / f"r{checkpoints}", spec, 0)
    settings = Settings(
        runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / f"store{checkpoints}")
    )
    tables = OpenTables(StoreLayout(settings.store_dir))
    steps = [RUN_ASSETS] if hand_over else [(EPISODES, SNAPSHOTS, STATES), (PROMPTS,)]
    stages = chain.from_iterable(build_stages(run.name, settings, tables, s) for s in steps)
    peaks = {}
    for _ in RUN_ASSETS:
        tracemalloc.start()
        try:
            asset, _report = next(stages)  # runs the next stage
            peaks[asset] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peaks, _input_bytes(run)


def test_peak_memory_of_every_stage_is_flat_in_the_number_of_checkpoints(tmp_path):
    _stage_peaks(tmp_path / "warm", 4)  # first-call costs (imports, prompt spec) are not a run's
    short, short_bytes = _stage_peaks(tmp_path, 40)
    long, long_bytes = _stage_peaks(tmp_path, 160)
    grown_input = long_bytes - short_bytes
    for asset in RUN_ASSETS:
        # Holding the run would add about the input's growth; the parts' index adds a little.
        assert long[asset] - short[asset] < grown_input // 10, (asset, short, long, grown_input)


def test_the_prompts_hand_over_adds_a_constant_to_a_stage_s_peak(tmp_path):
    """A build's states stage renders prompts for its prompts stage, up to a budget: the
    peaks stay flat, each above the stage run alone by about that budget at most."""
    _stage_peaks(tmp_path / "warm", 4, hand_over=True)
    alone, _ = _stage_peaks(tmp_path / "alone", 160)
    short, short_bytes = _stage_peaks(tmp_path / "short", 40, hand_over=True)
    long, long_bytes = _stage_peaks(tmp_path / "long", 160, hand_over=True)
    for asset in RUN_ASSETS:
        assert long[asset] - alone[asset] < 3 * RenderedPrompts.BUDGET, (asset, alone, long)
    # The prompts stage renders fewer of a short run's prompts itself: only the states
    # stage, which holds the hand-over, is compared across lengths.
    assert long[STATES] - short[STATES] < (long_bytes - short_bytes) // 10, (short, long)


RECENT_CHILD = r"""
import sys
import pyarrow as pa
from statepool_dagster.core.store.part_files import RecentParts

def anon_kb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

pa.array([])  # load what pyarrow loads on its first array before measuring
budget = 4 << 20
cache = RecentParts(budget)
# Small checkpoints, as a long run of a small library writes them: eleven columns, a few rows.
before = anon_kb()
for i in range(20_000):
    cols = {f"c{j}": pa.array([f"episode {i} field {j}"] * 4) for j in range(8)}
    cols.update({f"n{j}": pa.array([i, j, i + j, 0]) for j in range(3)})
    cache.put(("folder", f"v{i:019d}", "key"), pa.table(cols))
print((anon_kb() - before) * 1024 / budget)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's RssAnon")
def test_recent_parts_cache_holds_about_its_budget_however_small_its_tables():
    """The cache of recently written checkpoints counts what each table really holds.

    Each Arrow buffer of a cached table costs about half a kilobyte of C++ objects beyond
    its bytes; a long run of a small library fills the cache with thousands of small
    tables, which held four times the budget when only their bytes were counted.
    """
    done = subprocess.run(
        [sys.executable, "-c", RECENT_CHILD], capture_output=True, text=True, check=True
    )
    held = float(done.stdout)
    assert held < 1.5, f"the cache held {held:.1f}× its budget"


def test_report_figures_hold_no_python_object_per_episode(tmp_path):
    """The report's accuracy curve is counted in Arrow: a sync's report of a run with
    millions of episodes peaked at 0.8 GB when each episode became a Python dict."""
    spec = SampleSpec(n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=20_000)
    run = generate_run(tmp_path / "runs" / "run000", spec, 0)
    settings = Settings(runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / "store"))
    build_run(settings, run.name)
    episodes: Counter[int] = Counter()
    correct: Counter[int] = Counter()
    for line in (run / "episodes.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        episodes[record["skill_lib_version"]] += 1
        correct[record["skill_lib_version"]] += record["correct"]
    tracemalloc.start()
    try:
        figures = run_numbers(StoreLayout(settings.store_dir), run.name, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert figures.episodes == dict(sorted(episodes.items()))
    assert figures.accuracy == {v: correct[v] / n for v, n in sorted(episodes.items())}
    assert peak < 60_000 * 20, f"{peak} bytes of Python objects for 60,000 episodes"


def test_a_batch_of_many_episodes_is_not_held_as_python_rows(tmp_path):
    """A batch's rows become Arrow columns a few thousand at a time: one version with
    100,000 episodes held them all as Python tuples (~3× their bytes) until it ended."""
    spec = SampleSpec(n_checkpoints=1, n_cards=2, emb_dim=2, episodes_per_batch=30_000)
    run = generate_run(tmp_path / "runs" / "run000", spec, 0)
    settings = Settings(runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / "store"))
    load_arrow()  # pyarrow's first array imports pandas: not the stage's memory
    tracemalloc.start()
    try:
        tables = OpenTables(StoreLayout(settings.store_dir))
        report = build_episodes(run.name, settings, tables, fingerprint_run(run))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.rows == 30_000
    size = (run / "episodes.jsonl").stat().st_size
    # Python rows at once took 3× the batch; now a few thousand rows and a view of each text.
    assert peak < 1.5 * size, f"{peak} bytes of Python objects for a {size}-byte batch"
