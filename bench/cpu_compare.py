"""CPU side by side: the original's collect, the core alone and the commands, for several
checkouts, alternated in one sitting.

    python bench/cpu_compare.py --size wide --code /tmp/base --code . --repeat 3

CPU is user + system time of the command and the children it waited for (its build
workers): on a shared machine it barely moves with load, where wall time does. Each round
runs every measure once for every checkout in turn, so load drifts across all of them alike;
a figure is the median of the rounds. The table goes to stdout (and ``--doc-file``), every
figure to ``bench/out/cpu-<size>/results.json`` (``--out``: another folder than ``bench/out``).

Beside CPU: the peak RSS of the fair peer, of the sync from scratch and of the export
(``ru_maxrss`` of the command and the children it waited for: its largest process), and
Dagster's share of the sync from scratch per run partition, the sync's own CPU inside the
runs' Dagster runs, its build workers' left out (``sync_share.py``).

Last, the parts of the least a sync of this design can cost: stock Dagster recording as many
partitions, doing no work (``dagster_floor.py``), ``import pyarrow.parquet`` (``loaded.py``),
and what every building sync imports first (its peak RSS too); the table adds the first two
to the floor + prompts.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from cpu_table import (
    CORE,
    DAGSTER_ALONE,
    EXPORT,
    FLOOR,
    FLOOR_PROMPTS,
    GROWN,
    IDLE,
    IDLE_AGAIN,
    LIVE,
    LOADED,
    MEASURES,
    ORIGINAL,
    PARQUET,
    PEER,
    SHARE,
    SYNC,
    Figure,
    render,
)
from floor import check as check_floor
from measure import BENCH, REPO, Bench, empty_trash, last_json, statepool
from pool_suite import SEED
from run_bench import git
from shapes import SIZES, generate_corpus, run_name, spec_of

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint


def one_round(bench: Bench, runs: Path, label: str, spec: SampleSpec) -> dict[str, Figure]:
    """Every measure once for ``bench.code``: ``{measure: (cpu, wall[, peak RSS])}``."""
    out: dict[str, Figure] = {}
    for name, extra in ((FLOOR, ()), (FLOOR_PROMPTS, ("--prompts",))):
        folder = bench.out / f"{label}_floor"
        bench.discard(folder)
        m = bench.run(
            name,
            [sys.executable, str(BENCH / "floor.py"), str(runs), str(folder), *extra],
            inputs=runs,
        )
        out[name] = (m.cpu_seconds, m.seconds)
        original = bench.out / "seed_pool"
        if original.is_dir() and (wrong := check_floor(folder, original)):
            raise SystemExit(f"the floor's states differ from the original's: {wrong[:5]}")
    # The commands' own runs folder: the corpus' files linked, not copied, but the run that
    # grows by a checkpoint copied whole, so its growth leaves the corpus as it is.
    own_runs, grown = bench.out / f"{label}_runs", run_name(spec, 0)
    bench.discard(own_runs)
    subprocess.run(["cp", "-al", str(runs), str(own_runs)], check=True)
    shutil.rmtree(own_runs / grown)
    shutil.copytree(runs / grown, own_runs / grown)
    if SEED.is_file():
        folder = bench.out / f"{label}_peer"
        bench.discard(folder)
        peer = bench.program(PEER, "fair_peer", runs, folder)
        out[PEER] = (peer.cpu_seconds, peer.seconds, peer.peak_rss_mb)
    store = bench.out / f"{label}_core"
    bench.discard(store)
    core = bench.program(CORE, "core_only", runs, store, "--workers", 2)
    out[CORE] = (core.cpu_seconds, core.seconds)
    env = bench.fresh_env(label, own_runs)
    shared = bench.out / f"{label}_share.json"
    # What `statepool sync -q` does, in a process that counts Dagster's share of it.
    sync = [sys.executable, str(BENCH / "sync_share.py"), str(shared), "sync", "-q"]
    m = bench.run(SYNC, sync, env)
    out[SYNC] = (m.cpu_seconds, m.seconds, m.peak_rss_mb)
    share = json.loads(shared.read_text())
    if share["partitions"]:
        out[SHARE] = (1000 * share["cpu_s"] / share["partitions"], float(share["partitions"]))
    time.sleep(1.1)  # the instance's files settle, so an idle sync may keep its answers
    m = bench.run(IDLE, statepool("sync", "-q"), env)
    out[IDLE] = (m.cpu_seconds, m.seconds)
    time.sleep(1.1)
    m = bench.run(IDLE_AGAIN, statepool("sync", "-q"), env)
    out[IDLE_AGAIN] = (m.cpu_seconds, m.seconds)
    folder = bench.out / f"{label}_verl"
    bench.discard(folder)
    argv = statepool(
        "export", "--format", "verl", "--out", str(folder), "--store", env["STATEPOOL_STORE_DIR"]
    )
    m = bench.run(EXPORT, argv, env)
    out[EXPORT] = (m.cpu_seconds, m.seconds, m.peak_rss_mb)
    m = bench.program(LIVE, "live_open", env["STATEPOOL_STORE_DIR"], env=env)
    opened = last_json(m.stdout)
    out[LIVE] = (opened["open_cpu_s"], float(opened["states"]))
    append_checkpoint(own_runs / grown, spec, 0)
    m = bench.run(GROWN, statepool("sync", "-q"), env)
    out[GROWN] = (m.cpu_seconds, m.seconds)
    m = bench.program(LOADED, "loaded", env=env)
    out[LOADED] = (m.cpu_seconds, m.seconds, m.peak_rss_mb)
    m = bench.program(PARQUET, "loaded", "--parquet", env=env)
    out[PARQUET] = (m.cpu_seconds, m.seconds)
    # Stock Dagster recording as many partitions as the sync built, on a fresh instance of
    # the checkout's own configuration (its event log storage).
    partitions = int(share["partitions"]) if share["partitions"] else spec.n_runs
    alone = bench.fresh_env(f"{label}_dagster", own_runs)
    m = bench.program(DAGSTER_ALONE, "dagster_floor", partitions, env=alone)
    out[DAGSTER_ALONE] = (m.cpu_seconds, m.seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=SIZES, default="wide")
    parser.add_argument("--code", type=Path, action="append", default=[])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--doc-file", type=Path, default=None)
    parser.add_argument("--render", type=Path, default=None, help="a results.json: the page again")
    args = parser.parse_args(argv)
    if args.render is not None:
        page = render(json.loads(args.render.read_text()))
        if args.doc_file:
            args.doc_file.write_text(page)
        print(page, end="")
        return 0
    if not args.code:
        parser.error("--code DIR, once per checkout to measure")
    out = (args.out / f"cpu-{args.size}").resolve()
    runs = out / "runs"
    spec = spec_of(args.size)
    empty_trash(out)  # an earlier sitting's outputs, deleted before anything is timed
    if not (runs / ".complete").is_file():  # the corpus is reused while it is whole
        Bench(out=out).discard(runs)
        runs.mkdir(parents=True)
        generate_corpus(runs, spec)
        (runs / ".complete").write_text("")
    codes = [c.resolve() for c in args.code]
    labels = [
        f"{i}-{git(c, 'rev-parse', '--short', 'HEAD') or c.name}" for i, c in enumerate(codes)
    ]
    figures: dict[str, dict[str, list[Figure]]] = {
        label: {name: [] for name in (ORIGINAL, *MEASURES)} for label in labels
    }
    for round_ in range(args.repeat):
        for code, label in zip(codes, labels, strict=True):
            bench = Bench(out=out, code=code)
            if SEED.is_file():
                pool = out / "seed_pool"
                bench.discard(pool)
                m = bench.run(
                    ORIGINAL, [sys.executable, str(SEED), str(runs), str(pool)], inputs=runs
                )
                figures[label][ORIGINAL].append((m.cpu_seconds, m.seconds))
            for name, value in one_round(bench, runs, label, spec).items():
                figures[label][name].append(value)
            print(f"round {round_ + 1}, {label}: done", file=sys.stderr)
    named = dict(zip(labels, map(str, codes), strict=True))
    results = {
        "size": args.size,
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "command": shlex.join(["python", "bench/cpu_compare.py", *(argv or sys.argv[1:])]),
        "codes": named,
        "figures": figures,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    page = render(results)
    if args.doc_file:
        args.doc_file.write_text(page)
    print(page, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
