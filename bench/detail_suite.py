"""The reference's finer measures: incremental syncs, Dagster's floors, half the runs."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from dataclasses import asdict

from long_runs import long_and_short
from measure import Bench, Measure, last_json, median_of, statepool, step_seconds
from pool_suite import measure_json

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run


def incremental(bench: Bench, spec: SampleSpec, env: dict[str, str], repeat: int) -> dict:
    """One more run on the synced folder vs that run alone; then that run grown."""
    runs = bench.out / "runs"
    extra = generate_run(runs / "run_extra", spec, spec.n_runs)
    add = bench.run("sync: +1 run on N synced", statepool("sync", "-q"), env)
    alone_runs = bench.out / "alone_runs"
    alone_runs.mkdir()
    shutil.copytree(extra, alone_runs / extra.name)
    alone_steps: list[float] = []

    def sync_alone() -> Measure:
        alone_env = bench.fresh_env("alone", alone_runs)
        measure = bench.run("sync: that run alone", statepool("sync", "-q"), alone_env)
        alone_steps.append(step_seconds(bench, alone_env, extra.name))
        return measure

    grow_steps: list[float] = []

    def sync_grown() -> Measure:  # one more checkpoint each time
        append_checkpoint(extra, spec, spec.n_runs)
        measure = bench.run("sync: extra run grew 1 ckpt", statepool("sync", "-q"), env)
        grow_steps.append(step_seconds(bench, env, extra.name))
        return measure

    alone = median_of(repeat, sync_alone)
    grow = median_of(repeat, sync_grown)
    full_step, grow_step = statistics.median(alone_steps), statistics.median(grow_steps)
    return {
        "measures": [measure_json(m) for m in (add, alone, grow)],
        "add_one_run_vs_alone": add.seconds / alone.seconds,
        "step_seconds": {"full_run": full_step, "grown_run": grow_step},
        "grow_steps_vs_full_steps": grow_step / full_step if full_step else None,
    }


def floors(bench: Bench, spec: SampleSpec, repeat: int) -> dict[str, object]:
    """What Dagster and the core pay before any work, measured in this run."""
    runs = bench.out / "runs"
    imports = median_of(
        repeat, lambda: bench.program("core's imports alone", "core_only", "--imports-only")
    )
    bench.discard(bench.out / "core_grow")  # core_grow.py writes it anew
    grow = bench.program(
        "core grow", "core_grow", bench.out / "core_grow", json.dumps(asdict(spec))
    )
    nothing = bench.out / "floor_runs"  # it reads no run (and so warms nothing first)
    nothing.mkdir(exist_ok=True)
    floor_steps: list[float] = []

    def floor_run() -> Measure:
        env = bench.fresh_env("floor", nothing)
        name = "Dagster alone, same run, no work"
        measure = bench.program(name, "dagster_floor", spec.n_runs, env=env)
        floor_steps.append(step_seconds(bench, env, "run000") * spec.n_runs)
        return measure

    floor = median_of(repeat, floor_run)
    empty = bench.out / "empty_runs"
    bench.discard(empty)
    empty.mkdir(parents=True)

    def sync_floor() -> Measure:
        env = bench.fresh_env("floor", empty)
        return bench.run("sync floor (empty runs folder)", statepool("sync", "-q"), env)

    noop = bench.program("a Dagster step doing nothing", "noop_steps")
    # Memory flat in the number of runs: the same sync over half the runs (hard links).
    half_runs = bench.out / "half_runs"
    half_runs.mkdir()
    for folder in sorted(runs.glob("run[0-9]*"))[: max(1, spec.n_runs // 2)]:
        shutil.copytree(folder, half_runs / folder.name, copy_function=os.link)
    half = bench.run(
        "sync: half the runs", statepool("sync", "-q"), bench.fresh_env("half", half_runs)
    )
    return {
        "core_imports": measure_json(imports),
        "core_grow": last_json(grow.stdout),
        "dagster_floor": measure_json(floor),
        "dagster_floor_step_s": statistics.median(floor_steps),
        "sync_floor": measure_json(median_of(repeat, sync_floor)),
        "noop_step_s": last_json(noop.stdout),
        "rss_half_runs_mb": half.peak_rss_mb,
    }


def run_detail_suite(
    bench: Bench, size: str, spec: SampleSpec, env: dict[str, str], repeat: int
) -> dict[str, object]:
    results = {"incremental": incremental(bench, spec, env, repeat), **floors(bench, spec, repeat)}
    results["long_short"] = long_and_short(bench, size, repeat)
    return results
