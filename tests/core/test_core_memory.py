"""A build holds one checkpoint at a time: its memory does not grow with the run."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from statepool_dagster.core.build import STAGES, RunJob
from statepool_dagster.core.config import Settings
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run


def _input_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in run.rglob("*") if p.is_file())


def _stage_peaks(tmp_path: Path, checkpoints: int) -> tuple[dict[str, int], int]:
    spec = SampleSpec(
        n_runs=1, n_checkpoints=checkpoints, n_cards=40, emb_dim=64, episodes_per_batch=32
    )
    run = generate_run(tmp_path / "runs" / f"r{checkpoints}", spec, 0)
    settings = Settings(
        runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / f"store{checkpoints}")
    )
    job = RunJob(settings, run.name)
    peaks = {}
    for asset, stage in STAGES.items():
        tracemalloc.start()
        try:
            stage(job)
            peaks[asset] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peaks, _input_bytes(run)


def test_peak_memory_of_every_stage_is_flat_in_the_number_of_checkpoints(tmp_path):
    _stage_peaks(tmp_path / "warm", 4)  # first-call costs (imports, prompt spec) are not a run's
    short, short_bytes = _stage_peaks(tmp_path, 40)
    long, long_bytes = _stage_peaks(tmp_path, 160)
    grown_input = long_bytes - short_bytes
    for asset in STAGES:
        # Holding the run would add about the input's growth; the parts' index adds a little.
        assert long[asset] - short[asset] < grown_input // 10, (asset, short, long, grown_input)
