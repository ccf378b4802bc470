"""What every corpus size measures: the original, the core, sync, and the whole-pool commands."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from measure import BENCH, Bench, Measure, last_json, median_of, statepool
from shapes import SENSOR_FOLDERS, run_name

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint

SEED = BENCH.parents[1] / "shared" / "reference" / "statepool_seed.py"
ORIGINAL = "original script"
CORE = "core alone (no Dagster)"
SYNC = "statepool sync (fresh)"
IDLE = "statepool sync, nothing changed"
GROWN = "statepool sync, one run grown by one checkpoint"
EXPORT_FORMATS = ("verl", "trl", "pool")
# The commands that read the whole pool: their time per state is compared across sizes.
WHOLE_POOL = (
    "statepool status",
    *(f"statepool export --format {fmt}" for fmt in EXPORT_FORMATS),
    "statepool report",
    "training_dataset (materialized in process)",
)


def sync_measures(
    bench: Bench, spec: SampleSpec, runs: Path, repeat: int, postgres: bool = False
) -> tuple[list[Measure], dict[str, str]]:
    """Sync from scratch, then nothing changed, then one run grown by one checkpoint."""
    label = "postgres" if postgres else "sync"
    envs: list[dict[str, str]] = []

    def fresh() -> Measure:
        env = bench.fresh_env(label, runs, postgres=postgres)
        envs.append(env)
        return bench.run(SYNC, statepool("sync", "-q"), env)

    scratch = median_of(repeat, fresh)
    env = envs[-1]  # the last fresh sync's instance and store: the next cases build on it
    idle = median_of(repeat, lambda: bench.run(IDLE, statepool("sync", "-q"), env))
    first = runs / run_name(spec, 0)

    def grown() -> Measure:
        append_checkpoint(first, spec, 0)
        return bench.run(GROWN, statepool("sync", "-q"), env)

    return [scratch, idle, median_of(repeat, grown)], env


def whole_pool_measures(bench: Bench, env: dict[str, str], repeat: int) -> list[Measure]:
    """status, export in each format, report and training_dataset on a synced store."""
    store = env["STATEPOOL_STORE_DIR"]
    measures = [median_of(repeat, lambda: bench.run(WHOLE_POOL[0], statepool("status"), env))]
    for fmt, name in zip(EXPORT_FORMATS, WHOLE_POOL[1:4], strict=True):
        folder = bench.out / f"export_{fmt}"

        def export(fmt: str = fmt, folder: Path = folder, name: str = name) -> Measure:
            bench.discard(folder)  # a first export every time
            argv = statepool("export", "--format", fmt, "--out", str(folder), "--store", store)
            return bench.run(name, argv, env)

        measures.append(median_of(repeat, export))
    measures.append(median_of(repeat, lambda: bench.run(WHOLE_POOL[4], statepool("report"), env)))
    # Through Dagster, on the code location every deployment loads (materialize_dataset.py).
    dataset = WHOLE_POOL[5]
    measures.append(
        median_of(repeat, lambda: bench.program(dataset, "materialize_dataset", env=env))
    )
    return measures


def run_pool_suite(
    bench: Bench, size: str, spec: SampleSpec, runs: Path, repeat: int
) -> tuple[dict[str, object], dict[str, str]]:
    """Every corpus's common measures; the results and the synced SQLite environment."""
    measures: list[Measure] = []
    if SEED.is_file():
        seed = [sys.executable, str(SEED), str(runs), str(bench.out / "seed_pool")]
        measures.append(median_of(repeat, lambda: bench.run(ORIGINAL, seed, inputs=runs)))

    def core_alone() -> Measure:
        store = bench.out / "core_store"
        bench.discard(store)  # from nothing, every time
        return bench.program(CORE, "core_only", runs, store, "--workers", 2)

    core = median_of(repeat, core_alone)
    measures.append(core)
    synced, env = sync_measures(bench, spec, runs, repeat)
    measures += synced
    measures += whole_pool_measures(bench, env, repeat)
    states = int(core.stdout.strip().splitlines()[-1])
    unchanged, new = SENSOR_FOLDERS[size]
    bench.discard(bench.out / "sensor")
    tick = bench.program("sensor ticks", "sensor_tick", bench.out / "sensor", unchanged, new)
    results: dict[str, object] = {
        "states": states,
        "measures": [measure_json(m) for m in measures],
        "sensor": {"folders": unchanged, "new": new, **last_json(tick.stdout)},
        "dagster_share_ms": {"sqlite": dagster_share_ms(synced[0], core, spec)},
    }
    if bench.postgres:
        on_pg, _ = sync_measures(bench, spec, runs, repeat, postgres=True)
        results["postgres"] = [measure_json(m) for m in on_pg]
        results["dagster_share_ms"]["postgres"] = dagster_share_ms(on_pg[0], core, spec)
    return results, env


def measure_json(measure: Measure) -> dict[str, object]:
    figures = asdict(measure)
    figures.pop("stdout")
    return figures


def dagster_share_ms(sync: Measure, core: Measure, spec: SampleSpec) -> float:
    """Dagster's share of a sync from scratch, per partition: (sync − core alone) / runs."""
    return (sync.seconds - core.seconds) / spec.n_runs * 1000
