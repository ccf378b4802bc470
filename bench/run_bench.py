"""Benchmark: statepool sync vs the core alone vs the original script, on one generated corpus.

    python bench/run_bench.py                 # reference size (10 runs x 60 ckpt x 150 cards x 768-d)
    python bench/run_bench.py --size tiny     # seconds; what CI runs so the script cannot rot

Prints a Markdown table (ratios first) and writes bench/out/<size>/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED = REPO.parent / "shared" / "reference" / "statepool_seed.py"
BIN = Path(sys.executable).parent

SIZES = {
    "reference": dict(n_runs=10, n_checkpoints=60, n_cards=150, emb_dim=768, episodes_per_batch=32),
    "small": dict(n_runs=4, n_checkpoints=20, n_cards=60, emb_dim=384, episodes_per_batch=16),
    "tiny": dict(n_runs=3, n_checkpoints=4, n_cards=8, emb_dim=16, episodes_per_batch=4),
    "long": None,  # only the long and short runs below
}
SENSOR_FOLDERS = {"reference": (10_000, 1_000), "small": (2_000, 200), "tiny": (50, 10)}
# One long and one short run of the same shape: memory and the cost of one new checkpoint.
LONG_SHORT = {
    "reference": (480, 60, dict(n_cards=150, emb_dim=64, episodes_per_batch=32)),
    "long": (480, 60, dict(n_cards=150, emb_dim=64, episodes_per_batch=32)),
    "small": (120, 20, dict(n_cards=60, emb_dim=64, episodes_per_batch=16)),
    "tiny": (16, 4, dict(n_cards=8, emb_dim=16, episodes_per_batch=4)),
}


@dataclass
class Measure:
    name: str
    seconds: float
    peak_rss_mb: float


def median_of(repeat: int, measure: Callable[[], Measure]) -> Measure:
    """The median wall time of ``repeat`` runs of ``measure``; peak RSS: the largest seen."""
    runs = sorted((measure() for _ in range(max(1, repeat))), key=lambda m: m.seconds)
    middle = runs[len(runs) // 2]
    return Measure(middle.name, middle.seconds, max(m.peak_rss_mb for m in runs))


WARM_IMPORTS = "import statepool_dagster.definitions, statepool_dagster.cli.main, pyarrow.parquet"


def warm_page_cache(folder: Path) -> None:
    """Read every input file once before a timed command, so each starts from a warm cache.

    These machines reclaim idle page cache within minutes; a cold read of the reference
    corpus costs seconds and would land on whichever measure came first.
    """
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 22):
                    pass


def run_measured(
    name: str, argv: list[str], env: dict[str, str] | None = None, inputs: Path | None = None
) -> Measure:
    """Run a command, return its wall time and peak RSS (of the process and its children).

    ``inputs`` (default: the env's runs folder) is read first, untimed.
    """
    inputs = inputs or (Path(env["STATEPOOL_RUNS_DIR"]) if env else None)
    if inputs is not None:
        warm_page_cache(inputs)
    # The interpreter's packages are files too: load them once so they are in the cache.
    subprocess.run([sys.executable, "-c", WARM_IMPORTS], check=True, capture_output=True)
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: it never fills up
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            raise SystemExit(f"{name} failed: {errors.read().decode(errors='replace')[-2000:]}")
    return Measure(name, seconds, usage.ru_maxrss / 1024)


def input_mb(runs: Path) -> float:
    return sum(p.stat().st_size for p in runs.rglob("*") if p.is_file()) / 1e6


def fresh_env(out: Path, name: str, runs: Path) -> tuple[dict[str, str], Path]:
    home, store = out / f"{name}_home", out / f"{name}_store"
    for path in (home, store):
        shutil.rmtree(path, ignore_errors=True)
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(DAGSTER_HOME=str(home), STATEPOOL_RUNS_DIR=str(runs), STATEPOOL_STORE_DIR=str(store))
    return env, store


def step_seconds(home: Path, run_name: str) -> float:
    """Sum of the step durations of the latest Dagster run that covered ``run_name``."""
    code = f"""
import json, sys
from dagster import DagsterInstance, RunsFilter
inst = DagsterInstance.get()
best = None
for run in inst.get_runs(limit=50):
    tags = run.tags
    keys = [tags.get("dagster/partition")]
    if "dagster/asset_partition_range_start" in tags:
        keys = inst.get_dynamic_partitions("runs")
        lo = keys.index(tags["dagster/asset_partition_range_start"])
        hi = keys.index(tags["dagster/asset_partition_range_end"])
        keys = keys[lo : hi + 1]
    if {run_name!r} in keys:
        stats = inst.get_run_step_stats(run.run_id)
        best = sum((s.end_time - s.start_time) for s in stats if s.end_time and s.start_time)
        best = best / len(keys)
        break
print(json.dumps(best))
"""
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


NOOP_STEPS = """
import json, sys, tempfile
from dagster import (Definitions, DynamicPartitionsDefinition, asset, define_asset_job,
                     in_process_executor, instance_for_test)
runs = DynamicPartitionsDefinition(name="runs")
@asset(partitions_def=runs)
def a(context) -> None: context.add_output_metadata({"rows": 1})
@asset(partitions_def=runs, deps=[a])
def b(context) -> None: context.add_output_metadata({"rows": 1})
job = define_asset_job("noop", executor_def=in_process_executor)
defs = Definitions(assets=[a, b], jobs=[job])
with tempfile.TemporaryDirectory() as home, instance_for_test(temp_dir=home) as inst:
    inst.add_dynamic_partitions("runs", ["r"])
    steps = []
    for _ in range(4):
        result = defs.resolve_job_def("noop").execute_in_process(instance=inst, partition_key="r")
        steps += [s.end_time - s.start_time for s in inst.get_run_step_stats(result.run_id)]
print(json.dumps(sorted(steps)[len(steps) // 2]))
"""


DAGSTER_FLOOR = """
import sys, warnings
from dagster import (AssetCheckEvaluation, AssetCheckSpec, AssetExecutionContext, AssetSpec,
                     BackfillPolicy, BetaWarning, DagsterInstance, Definitions,
                     DynamicPartitionsDefinition, MaterializeResult, Output, PreviewWarning,
                     define_asset_job, in_process_executor, multi_asset)
from dagster._core.storage.tags import (ASSET_PARTITION_RANGE_END_TAG,
                                        ASSET_PARTITION_RANGE_START_TAG)
warnings.simplefilter("ignore", BetaWarning)
warnings.simplefilter("ignore", PreviewWarning)
runs = DynamicPartitionsDefinition(name="runs")
names = ["run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts"]
deps = {"checkpoint_states": names[:2], "curator_prompts": names[2:3]}
specs = [AssetSpec(n, deps=deps.get(n, [])) for n in names]
checks = [AssetCheckSpec(f"check{i}", asset=names[2 + i % 2], partitions_def=runs)
          for i in range(5)]
@multi_asset(specs=specs, check_specs=checks, can_subset=True, partitions_def=runs,
             backfill_policy=BackfillPolicy.single_run())
def noop(context: AssetExecutionContext):
    keys = context.partition_keys
    for name in names:
        for key in keys:
            context.add_asset_metadata({"rows": 1}, asset_key=name, partition_key=key)
        yield MaterializeResult(asset_key=name)
    for key in keys:
        for check in checks:
            yield AssetCheckEvaluation(asset_key=check.asset_key, check_name=check.name,
                                       partition=key, passed=True, metadata={"rows": 1})
    for check in checks:
        yield Output(None, context.assets_def.get_output_name_for_asset_check_key(check.key))
job = define_asset_job("noop_batch", executor_def=in_process_executor)
defs = Definitions(assets=[noop], jobs=[job])
instance = DagsterInstance.get()  # a fresh DAGSTER_HOME, as statepool sync starts from
import gc; gc.freeze()  # as statepool sync does: the loaded heap is never walked again
keys = [f"run{i:03d}" for i in range(int(sys.argv[1]))]
instance.add_dynamic_partitions("runs", keys)
tags = {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
result = defs.resolve_job_def("noop_batch").execute_in_process(
    instance=instance, tags=tags, run_config=quiet)
sys.exit(0 if result.success else 1)
"""


def dagster_floor(out: Path, n_runs: int) -> Measure:
    """Dagster alone, shaped like ``statepool sync``'s batch run, doing no work.

    Import, a fresh SQLite instance, and one run of one four-asset ``multi_asset`` step
    over ``n_runs`` partitions with per-partition metadata and five checks evaluated per
    partition: what any sync of that many runs pays to record its results.
    """
    nothing = out / "floor_runs"  # it reads no run (and so warms nothing before it starts)
    nothing.mkdir(exist_ok=True)
    env, _ = fresh_env(out, "floor", nothing)
    argv = [sys.executable, "-c", DAGSTER_FLOOR, str(n_runs)]
    return run_measured("Dagster alone, same run, no work", argv, env)


def noop_step_seconds() -> float:
    """Median recorded duration of a Dagster step that does nothing: the per-step floor."""
    done = subprocess.run([sys.executable, "-c", NOOP_STEPS], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"no-op step benchmark failed: {done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def core_grow(out: Path, spec) -> dict[str, float]:
    """The four stages' own time (no Dagster) for one run, built from nothing, then grown."""
    code = f"""
import json, shutil, sys, time
from pathlib import Path
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run
from statepool_dagster.core.config import Settings
from statepool_dagster.core.stages import build_run
root = Path(sys.argv[1]); shutil.rmtree(root, ignore_errors=True)
spec = SampleSpec(**{asdict(spec)!r})
run = generate_run(root / "runs" / "run000", spec, 0)
generate_run(root / "runs" / "warm", spec, 1)
settings = Settings(runs_dir=str(root / "runs"), store_dir=str(root / "store"))
build_run(settings, "warm")  # first-call costs (imports, prompt spec) are not the run's
t = time.perf_counter(); build_run(settings, "run000"); full = time.perf_counter() - t
append_checkpoint(run, spec, 0)
t = time.perf_counter(); build_run(settings, "run000"); grown = time.perf_counter() - t
print(json.dumps(dict(full_s=full, grown_s=grown)))
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(out / "core_grow")], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"core grow benchmark failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sensor_ticks(out: Path, unchanged: int, new: int) -> dict[str, float]:
    """Time one sensor tick over ``unchanged`` materialized folders, then with ``new`` more."""
    code = f"""
import json, os, sys, tempfile, time
from pathlib import Path
root = Path(sys.argv[1]); runs = root / "runs"; runs.mkdir(parents=True)
os.environ.update(STATEPOOL_RUNS_DIR=str(runs), STATEPOOL_STORE_DIR=str(root / "store"),
                  STATEPOOL_SETTLE_SECONDS="0")
from dagster import AssetMaterialization, build_sensor_context, instance_for_test
from statepool_dagster.definitions import defs
from statepool_dagster.core.runs.files import fingerprint_run
from statepool_dagster.defs.sensors import runs_sensor
def make(name):
    d = runs / name; d.mkdir(); (d / "episodes.jsonl").write_text('{{"id": 1}}\\n')
    return d
(root / "home").mkdir()
with instance_for_test(temp_dir=str(root / "home")) as inst:
    names = [f"r{{i:05d}}" for i in range({unchanged})]
    inst.add_dynamic_partitions("runs", names)
    for name in names:
        fp = fingerprint_run(make(name)).digest
        inst.report_runless_asset_event(AssetMaterialization(
            "curator_prompts", partition=name, metadata={{"source_fingerprint": fp}}))
    def tick():
        with build_sensor_context(instance_ref=inst.get_ref(), definitions=defs) as ctx:
            t = time.perf_counter(); result = runs_sensor.evaluate_tick(ctx)
            return time.perf_counter() - t, len(result.run_requests)
    cold, requested_cold = tick()
    warm, requested = tick()
    for i in range({new}):
        make(f"n{{i:05d}}")
    with_new, requested_new = tick()
print(json.dumps(dict(unchanged_cold_s=cold, unchanged_s=warm, unchanged_requests=requested,
                      new_s=with_new, new_requests=requested_new)))
"""
    root = out / "sensor"
    shutil.rmtree(root, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"sensor benchmark failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# What bench/core_only.py loads before it reads a byte: the interpreter, the core, pyarrow
# and pandas (pyarrow imports it on its first array).
CORE_IMPORTS = (
    "import sys; sys.path.insert(0, sys.argv[1]); import core_only; core_only.load_arrow()"
)


def core_imports(runs: Path) -> Measure:
    """The core's fixed cost: ``bench/core_only.py``'s imports, timed as a process of their own."""
    argv = [sys.executable, "-c", CORE_IMPORTS, str(REPO / "bench")]
    return run_measured("core's imports alone", argv, inputs=runs)


def sync_argv() -> list[str]:
    return [str(BIN / "statepool"), "sync", "-q"]


def long_and_short(out: Path, size: str, repeat: int) -> dict[str, object]:
    """Sync from scratch, idle and grown by one checkpoint, on one long and one short run."""
    from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

    n_long, n_short, shape = LONG_SHORT[size]
    results: dict[str, object] = {"shape": shape}
    for label, n in (("long", n_long), ("short", n_short)):
        spec = SampleSpec(n_runs=1, n_checkpoints=n, **shape)
        runs = out / f"{label}_runs"
        shutil.rmtree(runs, ignore_errors=True)
        run = generate_run(runs / "run000", spec, 0)
        env, _ = fresh_env(out, label, runs)
        scratch = run_measured(f"{label}: sync from scratch", sync_argv(), env)
        step = step_seconds(Path(env["DAGSTER_HOME"]), run.name)
        idle = median_of(
            repeat,
            lambda env=env, label=label: run_measured(f"{label}: idle sync", sync_argv(), env),
        )

        def grown(env=env, run=run, spec=spec, label=label) -> Measure:
            append_checkpoint(run, spec, 0)
            return run_measured(f"{label}: grown by one checkpoint", sync_argv(), env)

        grow = median_of(repeat, grown)
        results[label] = {
            "checkpoints": n,
            "input_mb": input_mb(runs),
            "scratch_s": scratch.seconds,
            "scratch_rss_mb": scratch.peak_rss_mb,
            "scratch_step_s": step,
            "idle_s": idle.seconds,
            "grown_s": grow.seconds,
            "grown_rss_mb": grow.peak_rss_mb,
            "absorb_s": grow.seconds - idle.seconds,
        }
    dagster_floor(out, 1)  # what recording one partition costs Dagster, with no work at all
    results["dagster_one_partition_step_s"] = step_seconds(out / "floor_home", "run000")
    long, short = results["long"], results["short"]
    results["absorb_long_vs_short"] = (
        long["absorb_s"] / short["absorb_s"] if short["absorb_s"] > 0 else None
    )
    results["absorb_long_vs_short_step"] = (
        long["absorb_s"] / short["scratch_step_s"] if short["scratch_step_s"] else None
    )
    return results


def sync_floor(out: Path) -> Measure:
    """``statepool sync`` on an empty runs folder with a fresh DAGSTER_HOME: Dagster's fixed cost."""
    empty = out / "empty_runs"
    shutil.rmtree(empty, ignore_errors=True)
    empty.mkdir(parents=True)
    env, _ = fresh_env(out, "floor", empty)
    return run_measured("sync floor (empty runs folder)", sync_argv(), env)


def render_long(results: dict) -> str:
    long, short = results["long"], results["short"]
    rows = [
        "| one run | checkpoints | input MB | sync from scratch s | peak RSS MB | idle sync s | grown by one s | absorbing one ckpt s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in (("long", long), ("short", short)):
        rows.append(
            f"| {label} | {r['checkpoints']} | {r['input_mb']:.0f} | {r['scratch_s']:.2f} | {r['scratch_rss_mb']:.0f} | {r['idle_s']:.2f} | {r['grown_s']:.2f} | {r['absorb_s']:.2f} |"
        )
    ratio = results["absorb_long_vs_short"]
    step = results["absorb_long_vs_short_step"]
    rows += [
        "",
        f"Absorbing one checkpoint, long / short: {ratio:.2f}× (target ≤ 1.3×); "
        f"long / the short run's from-scratch step time ({short['scratch_step_s']:.2f} s): {step:.0%} (target ≤ 30%)."
        if ratio is not None and step is not None
        else "Absorbing one checkpoint: too fast to compare at this size.",
        "",
        "Dagster's own part of absorbing one: a step that does nothing but record one partition "
        f"of the same four assets and five checks takes {results['dagster_one_partition_step_s']:.2f} s "
        f"({results['dagster_one_partition_step_s'] / short['scratch_step_s']:.0%} of the short run's step), "
        "before the run around it is created and finished.",
    ]
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="reference")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each repeatable measure (median)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

    out = args.out / args.size
    if SIZES[args.size] is None:
        out.mkdir(parents=True, exist_ok=True)
        results = {"size": args.size, "long_short": long_and_short(out, args.size, args.repeat)}
        (out / "results.json").write_text(json.dumps(results, indent=1))
        print(render_long(results["long_short"]))
        return 0
    spec = SampleSpec(**SIZES[args.size])
    runs = out / "runs"
    shutil.rmtree(out, ignore_errors=True)
    runs.mkdir(parents=True)
    t = time.perf_counter()
    for i in range(spec.n_runs):
        generate_run(runs / f"run{i:03d}", spec, i)
    print(f"generated {input_mb(runs):.0f} MB in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    mb = input_mb(runs)
    results: dict[str, object] = {"size": args.size, "spec": asdict(spec), "input_mb": mb}

    measures = []
    if SEED.is_file():
        seed = [sys.executable, str(SEED), str(runs), str(out / "seed_pool")]
        measures.append(
            median_of(args.repeat, lambda: run_measured("original script", seed, None, runs))
        )

    def core_alone() -> Measure:
        store = out / "core_store"
        shutil.rmtree(store, ignore_errors=True)  # from nothing, every time
        argv = [sys.executable, str(REPO / "bench" / "core_only.py"), str(runs), str(store)]
        return run_measured("core alone (no Dagster)", argv, inputs=runs)

    envs: list[dict[str, str]] = []

    def sync_fresh() -> Measure:
        env, _ = fresh_env(out, "sync", runs)
        envs.append(env)
        return run_measured("statepool sync (fresh)", [str(BIN / "statepool"), "sync", "-q"], env)

    measures.append(median_of(args.repeat, core_alone))
    results["core_imports"] = asdict(median_of(args.repeat, lambda: core_imports(runs)))
    measures.append(median_of(args.repeat, sync_fresh))
    env = envs[-1]  # the last fresh sync's instance and store: the incremental cases build on it

    # Incremental cost: one more run on the synced folder vs that run alone.
    extra = generate_run(runs / "run_extra", spec, spec.n_runs)
    add = run_measured("sync: +1 run on N synced", [str(BIN / "statepool"), "sync", "-q"], env)
    alone_runs = out / "alone_runs"
    alone_runs.mkdir()
    shutil.copytree(extra, alone_runs / extra.name)
    alone_steps: list[float] = []

    def sync_alone() -> Measure:
        alone_env, _ = fresh_env(out, "alone", alone_runs)
        measure = run_measured(
            "sync: that run alone", [str(BIN / "statepool"), "sync", "-q"], alone_env
        )
        alone_steps.append(step_seconds(Path(alone_env["DAGSTER_HOME"]), extra.name))
        return measure

    grow_steps_seen: list[float] = []

    def sync_grown() -> Measure:  # one more checkpoint each time
        append_checkpoint(extra, spec, spec.n_runs)
        measure = run_measured("sync: run grew 1 ckpt", [str(BIN / "statepool"), "sync", "-q"], env)
        grow_steps_seen.append(step_seconds(Path(env["DAGSTER_HOME"]), extra.name))
        return measure

    alone = median_of(args.repeat, sync_alone)
    grow = median_of(args.repeat, sync_grown)
    full_steps, grow_steps = statistics.median(alone_steps), statistics.median(grow_steps_seen)
    measures += [add, alone, grow]
    results["core_grow"] = core_grow(out, spec)
    floor_steps: list[float] = []

    def floor_run() -> Measure:
        measure = dagster_floor(out, spec.n_runs)
        per_run = step_seconds(out / "floor_home", "run000")
        floor_steps.append(per_run * spec.n_runs)
        return measure

    floor = median_of(args.repeat, floor_run)
    results["dagster_floor"] = asdict(floor)
    results["dagster_floor_step_s"] = statistics.median(floor_steps)
    results["sync_floor"] = asdict(median_of(args.repeat, lambda: sync_floor(out)))
    results["long_short"] = long_and_short(out, args.size, args.repeat)
    results["noop_step_s"] = noop_step_seconds()

    # Memory flat in the number of runs: the same sync over half the runs (hard links).
    half_runs = out / "half_runs"
    half_runs.mkdir()
    for i in range(max(1, spec.n_runs // 2)):
        shutil.copytree(runs / f"run{i:03d}", half_runs / f"run{i:03d}", copy_function=os.link)
    half_env, _ = fresh_env(out, "half", half_runs)
    half = run_measured("sync: half the runs", [str(BIN / "statepool"), "sync", "-q"], half_env)
    results["rss_half_runs_mb"] = half.peak_rss_mb

    sensor_unchanged, sensor_new = SENSOR_FOLDERS[args.size]
    results["sensor"] = {
        "folders": sensor_unchanged,
        "new": sensor_new,
        **sensor_ticks(out, sensor_unchanged, sensor_new),
    }

    by = {m.name: m for m in measures}
    seed = by.get("original script")
    results["measures"] = [asdict(m) for m in measures]
    results["ratios"] = {
        "sync_speedup_vs_original": seed.seconds / by["statepool sync (fresh)"].seconds
        if seed
        else None,
        "core_speedup_vs_original": seed.seconds / by["core alone (no Dagster)"].seconds
        if seed
        else None,
        "add_one_run_vs_alone": add.seconds / alone.seconds,
        "grow_steps_vs_full_steps": grow_steps / full_steps if full_steps else None,
    }
    results["step_seconds"] = {"full_run": full_steps, "grown_run": grow_steps}
    sync_s = by["statepool sync (fresh)"].seconds
    results["ratios"]["sync_minus_floor_s"] = sync_s - results["sync_floor"]["seconds"]
    if seed:
        results["floors"] = floors(results)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(render(results))
    print()
    print(render_long(results["long_short"]))
    if seed:
        print()
        print(render_floors(results))
    return 0


def render(results: dict) -> str:
    mb = results["input_mb"]
    seed = next((m for m in results["measures"] if m["name"] == "original script"), None)
    lines = [
        f"Corpus: {results['size']} — {json.dumps(results['spec'])}, {mb:.0f} MB of input",
        "",
        "| measure | wall s | MB/s | peak RSS MB | vs original |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in results["measures"][:3]:
        speed = f"{seed['seconds'] / m['seconds']:.1f}×" if seed else "-"
        lines.append(
            f"| {m['name']} | {m['seconds']:.2f} | {mb / m['seconds']:.0f} | {m['peak_rss_mb']:.0f} | {speed} |"
        )
    r, s, g = results["ratios"], results["sensor"], results["core_grow"]
    floor = results["dagster_floor"]
    budget = f" (10× the original allows {seed['seconds'] / 10:.2f} s)" if seed else ""
    lines += [
        "",
        "| incremental | figure |",
        "|---|---:|",
        *(f"| {m['name']} | {m['seconds']:.2f} s |" for m in results["measures"][3:]),
        f"| +1 run on N synced / that run alone | {r['add_one_run_vs_alone']:.2f}× |",
        f"| grown run's step time / full step time | {r['grow_steps_vs_full_steps']:.0%} |",
        f"| a Dagster step that does nothing (a run is one step) | {results['noop_step_s']:.3f} s |",
        f"| `statepool sync` on an empty runs folder, fresh DAGSTER_HOME (the floor) | {results['sync_floor']['seconds']:.2f} s |",
        f"| sync minus the floor | {r['sync_minus_floor_s']:.2f} s{' (original / 10: ' + format(seed['seconds'] / 10, '.2f') + ' s)' if seed else ''} |",
        f"| Dagster alone: import, fresh instance, one batch run of {results['spec']['n_runs']} partitions doing nothing (4 assets, 5 checks each) | {floor['seconds']:.2f} s |",
        f"| its step alone: recording {results['spec']['n_runs']} partitions' materializations and checks | {results['dagster_floor_step_s']:.2f} s{budget} |",
        f"| the same for the core alone (no Dagster) | {g['grown_s']:.3f} s / {g['full_s']:.3f} s = {g['grown_s'] / g['full_s']:.0%} |",
        f"| peak RSS of sync, all {results['spec']['n_runs']} runs / half of them | {results['measures'][2]['peak_rss_mb']:.0f} MB / {results['rss_half_runs_mb']:.0f} MB |",
        f"| sensor tick, {s['folders']} unchanged folders | {s['unchanged_s']:.2f} s ({s['unchanged_requests']} requests; first tick {s['unchanged_cold_s']:.2f} s) |",
        f"| sensor tick, +{s['new']} new folders | {s['new_s']:.2f} s ({s['new_requests']} requests) |",
    ]
    return "\n".join(lines)


def floors(results: dict) -> list[dict[str, object]]:
    """Each speed target of the checkpoint issue beside what the design pays before any work.

    The floors are measured in the same run: the core's imports (``core_only.py`` loading
    pyarrow and pandas), Dagster recording the same materializations and checks with no
    work at all (a fresh instance; its step alone; one partition's step).
    """
    seed = next(m for m in results["measures"] if m["name"] == "original script")["seconds"]
    by = {m["name"]: m["seconds"] for m in results["measures"]}
    long_short = results["long_short"]
    short_step = long_short["short"]["scratch_step_s"]
    rows = [
        (
            "core alone ≥ 15× the original",
            seed / 15,
            by["core alone (no Dagster)"],
            results["core_imports"]["seconds"],
            "its imports alone",
        ),
        (
            "statepool sync ≥ 5× the original",
            seed / 5,
            by["statepool sync (fresh)"],
            results["dagster_floor"]["seconds"],
            "Dagster alone: import, fresh instance, the same records, no work",
        ),
        (
            "sync − the floor ≤ original / 10",
            seed / 10,
            results["ratios"]["sync_minus_floor_s"],
            results["dagster_floor_step_s"],
            "Dagster's step recording them, no work",
        ),
        (
            "absorbing one checkpoint ≤ 30% of the short run's step",
            0.3 * short_step,
            long_short["long"]["absorb_s"],
            long_short["dagster_one_partition_step_s"],
            "Dagster's step recording one partition, no work",
        ),
    ]
    return [
        {"target": t, "allowed_s": a, "measured_s": m, "floor_s": f, "floor": what}
        for t, a, m, f, what in rows
    ]


def render_floors(results: dict) -> str:
    lines = [
        "| target | allowed s | measured s | floor s | the floor: what the design pays before any work |",
        "|---|---:|---:|---:|---|",
    ]
    for row in floors(results):
        mark = " (over)" if row["floor_s"] > row["allowed_s"] else ""
        lines.append(
            f"| {row['target']} | {row['allowed_s']:.2f} | {row['measured_s']:.2f} | "
            f"{row['floor_s']:.2f}{mark} | {row['floor']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
