"""One huge episode field: each stage holds a few copies of it at most (issue 14).

The copies a stage may not avoid, for a field of N bytes: episodes, its record and
``json.dumps`` text beside the first Arrow column (3N), then the two Arrow columns
beside the Parquet page being written (3N); states, the batch read back beside the
state's bytes (2N); prompts, the state read back (page and array, 2N).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from statepool_dagster.core.prompts.render import build_curator_prompt
from statepool_dagster.core.prompts.template import format_episodes
from statepool_dagster.core.runs.episodes import CHUNK
from statepool_dagster.core.stages.job import digest, digest_pieces
from statepool_dagster.core.stages.run import build_run
from statepool_dagster.core.states.models import CheckpointState
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.reading import read_run_table
from statepool_dagster.core.store.rows import utf8_views
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

PEAKS_PROBE = """
import json, sys
from itertools import chain
from pathlib import Path
from statepool_dagster.core.stages import OpenTables, build_stages
from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, RUN_ASSETS, SNAPSHOTS, STATES
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.rows import load_arrow

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

runs, store, run = sys.argv[1:4]
load_arrow()
settings = Settings(runs_dir=runs, store_dir=store)
tables = OpenTables(StoreLayout(store))
# Each stage alone: the prompts stage in a step of its own, handed no prompts.
stages = chain(
    build_stages(run, settings, tables, (EPISODES, SNAPSHOTS, STATES)),
    build_stages(run, settings, tables, (PROMPTS,)),
)
peaks = {}
for asset in RUN_ASSETS:
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS starts again from the current RSS
    before = status("VmRSS")
    built, _ = next(stages)  # runs the next stage
    peaks[built] = status("VmHWM") - before
print(json.dumps(peaks))
"""
# Copies of the field each stage may hold at its peak; measured 3.2, 0, 2.05, 1.0 at 64 MB
# (before issue 14: 8.3, 0, 5.0, 7.0).
COPIES_ALLOWED = {EPISODES: 4.0, SNAPSHOTS: 0.5, STATES: 3.0, PROMPTS: 3.0}


def _run_with_huge_field(root: Path, size: int) -> Path:
    spec = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=8, emb_dim=16, episodes_per_batch=4)
    run = generate_run(root / "runs" / "big", spec, 0)
    huge = {"id": "huge", "skill_lib_version": 1, "response": "x" * size}
    with open(run / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(huge) + "\n")
    return run


def _assert_states_are_the_originals(seed_module, run: Path, store: Path, out: Path) -> None:
    assert seed_module.collect_from_run(str(run), str(out)) > 0
    for original in sorted(out.iterdir()):
        ours = store / "state_pool" / run.name / original.name
        assert ours.read_bytes() == original.read_bytes(), original.name


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux's peak-RSS reset"
)
def test_each_stage_holds_a_few_copies_of_one_huge_field_at_most(tmp_path, seed_module):
    size = 64_000_000  # above glibc's largest mmap threshold: every copy is its own mapping
    run = _run_with_huge_field(tmp_path, size)
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-c", PEAKS_PROBE, str(run.parent), str(store), run.name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    copies = {asset: peak / size for asset, peak in json.loads(done.stdout).items()}
    assert all(copies[asset] < allowed for asset, allowed in COPIES_ALLOWED.items()), copies
    _assert_states_are_the_originals(seed_module, run, store, tmp_path / "seed")

    settings = Settings(runs_dir=str(run.parent), store_dir=str(store))
    prompts = read_run_table(StoreLayout(store), PROMPTS, run.name, ["state_id", "prompt"])
    prompt = dict(zip(*prompts.to_pydict().values(), strict=True))["big_ckpt2"]
    whole_text = settings.prompt_spec().model_copy(
        update={"episode_formatter": lambda episodes: format_episodes(episodes)}
    )
    state = CheckpointState.from_json((tmp_path / "seed" / "big_ckpt2.json").read_bytes())
    assert prompt == build_curator_prompt(state, whole_text)


def test_lines_longer_than_a_read_give_the_originals_states(tmp_path, seed_module):
    """Lines of about one read's length, and past it, with either line end, between short ones."""
    run = _run_with_huge_field(tmp_path, 3 * CHUNK)
    lines = (run / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    for i, extra in enumerate([-40, -1, 0, 1, CHUNK + 7]):
        padding = "y" * (CHUNK - 60 + extra)
        line = json.dumps({"id": f"long{i}", "skill_lib_version": i % 3, "question": padding})
        lines.insert(2 * i + 1, line.encode() + (b"\r\n" if i % 2 else b"\n"))
    (run / "episodes.jsonl").write_bytes(b"".join(lines))
    store = tmp_path / "store"
    build_run(Settings(runs_dir=str(run.parent), store_dir=str(store)), run.name)
    _assert_states_are_the_originals(seed_module, run, store, tmp_path / "seed")


@settings(max_examples=200)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["id", "task", "question", "gt", "response", "correct", "options"]),
            st.none() | st.booleans() | st.text(max_size=12) | st.lists(st.text(max_size=3)),
        ),
        max_size=4,
    ),
    st.integers(0, 300),
)
def test_bundled_formatter_under_a_limit_is_its_whole_text_cut(episodes, limit):
    assert format_episodes(episodes, limit) == format_episodes(episodes)[:limit]


@settings(max_examples=100)
@given(st.lists(st.lists(st.none() | st.text(max_size=8), max_size=5), max_size=4), st.data())
def test_utf8_views_are_the_column_texts_encoded(chunks, data):
    """Chunked and sliced columns; a null is empty. Part keys digest these views."""
    column = pa.chunked_array([pa.array(c, pa.large_string()) for c in chunks], pa.large_string())
    start = data.draw(st.integers(0, len(column)))
    column = column.slice(start, data.draw(st.integers(0, len(column) - start)))
    texts = ["" if t is None else t for t in column.to_pylist()]
    views = utf8_views(column)
    assert [bytes(v) for v in views] == [t.encode("utf-8") for t in texts]
    assert digest_pieces([(b"3",), *((v,) for v in views)]) == digest("3", *texts)
