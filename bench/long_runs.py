"""One long and one short run: sync from scratch, idle, and grown one checkpoint at a time."""

from __future__ import annotations

import statistics

from measure import Bench, Measure, median_of, statepool, step_seconds
from shapes import GROWTHS, LONG_SHORT

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run


def one_run(bench: Bench, label: str, spec: SampleSpec, repeat: int) -> dict[str, object]:
    runs = bench.out / f"{label}_runs"
    bench.discard(runs)
    run = generate_run(runs / "run000", spec, 0)
    env = bench.fresh_env(label, runs)
    sync = statepool("sync", "-q")
    scratch = bench.run(f"{label}: sync from scratch", sync, env)
    scratch_step = step_seconds(bench, env, run.name)
    idle = median_of(repeat, lambda: bench.run(f"{label}: idle sync", sync, env))
    grown: list[Measure] = []
    steps: list[float] = []
    for _ in range(max(GROWTHS, repeat)):  # in a row: each sync absorbs one more checkpoint
        append_checkpoint(run, spec, 0)
        grown.append(bench.run(f"{label}: grown by one checkpoint", sync, env))
        steps.append(step_seconds(bench, env, run.name))
    grow = sorted(grown, key=lambda m: m.seconds)[len(grown) // 2]
    return {
        "checkpoints": spec.n_checkpoints,
        "input_mb": sum(p.stat().st_size for p in runs.rglob("*") if p.is_file()) / 1e6,
        "scratch_s": scratch.seconds,
        "scratch_rss_mb": scratch.peak_rss_mb,
        "scratch_step_s": scratch_step,
        "idle_s": idle.seconds,
        "grown_s": grow.seconds,
        "grown_rss_mb": max(m.peak_rss_mb for m in grown),
        "absorb_s": grow.seconds - idle.seconds,
        "grown_steps_s": steps,
        "grown_step_s": statistics.median(steps),
    }


def dagster_one_partition(bench: Bench) -> float:
    """The step time of Dagster recording one partition of the same assets, with no work."""
    nothing = bench.out / "floor_runs"  # it reads no run (and so warms nothing first)
    nothing.mkdir(parents=True, exist_ok=True)
    env = bench.fresh_env("floor", nothing)
    bench.program("Dagster alone, one partition", "dagster_floor", 1, env=env)
    return step_seconds(bench, env, "run000")


def long_and_short(bench: Bench, size: str, repeat: int) -> dict[str, object]:
    """Sync from scratch, idle and grown by one checkpoint, on one long and one short run."""
    n_long, n_short, shape = LONG_SHORT[size]
    results: dict[str, object] = {"shape": shape}
    for label, n in (("long", n_long), ("short", n_short)):
        spec = SampleSpec(n_runs=1, n_checkpoints=n, **shape)
        results[label] = one_run(bench, label, spec, repeat)
    results["dagster_one_partition_step_s"] = dagster_one_partition(bench)
    long, short = results["long"], results["short"]
    results["absorb_long_vs_short"] = (
        long["absorb_s"] / short["absorb_s"] if short["absorb_s"] > 0 else None
    )
    results["absorb_long_vs_short_step"] = (
        long["absorb_s"] / short["scratch_step_s"] if short["scratch_step_s"] else None
    )
    results["grown_step_long_vs_short"] = (
        long["grown_step_s"] / short["grown_step_s"] if short["grown_step_s"] else None
    )
    return results
