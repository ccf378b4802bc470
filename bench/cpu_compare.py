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
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from floor import check as check_floor
from measure import BENCH, REPO, Bench, empty_trash, last_json, statepool
from pool_suite import SEED
from run_bench import git
from shapes import SIZES, generate_corpus, run_name, spec_of

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint

ORIGINAL = "the original's collect_from_run, every run"
FLOOR = "the floor: files read once, arrays cut out by bytes, msgspec, each distinct card dumped once, every state file written (floor.py)"
FLOOR_PROMPTS = "the floor + every prompt rendered (floor.py --prompts)"
PEER = "the fair peer: the original + every prompt + one Parquet by pandas (fair_peer.py)"
CORE = "core alone (bench/core_only.py, 2 workers)"
SYNC = "statepool sync from scratch"
IDLE = "statepool sync, nothing changed"
IDLE_AGAIN = "statepool sync, nothing changed, again (the instance's answers kept: cli/idle.py)"
EXPORT = "statepool export --format verl"
LIVE = "LivePool open, every state of the synced store (imports left out)"
SHARE = "Dagster's share of the sync from scratch per run partition, ms (sync_share.py)"
GROWN = "statepool sync after one new checkpoint in one run"
LOADED = "what any sync loads before its work: dagster, pyarrow.parquet, the definitions (no work)"
MEASURES = (
    FLOOR,
    FLOOR_PROMPTS,
    PEER,
    CORE,
    SYNC,
    IDLE,
    IDLE_AGAIN,
    EXPORT,
    LIVE,
    SHARE,
    GROWN,
    LOADED,
)
# Measures whose peak RSS the table shows (MB, the command and its waited-for children).
RSS_SHOWN = (PEER, SYNC, EXPORT, LOADED)
# The imports every sync makes before it looks at a run (the CLI imports them lazily, so
# the idle sync skips them; a sync that builds cannot).
LOAD = "import dagster, pyarrow.parquet, statepool_dagster.definitions"


Figure = tuple[float, ...]  # (cpu, wall) or (cpu, wall, peak RSS MB); SHARE: (ms, partitions)


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
    m = bench.run(LOADED, [sys.executable, "-c", LOAD], env)
    out[LOADED] = (m.cpu_seconds, m.seconds, m.peak_rss_mb)
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


def render(results: dict) -> str:
    figures = results["figures"]
    labels = list(figures)

    def med(label: str, name: str, i: int) -> float:
        values = [v[i] for v in figures[label][name]]
        return statistics.median(values) if values else float("nan")

    header = [
        "<!-- written by bench/cpu_compare.py; do not edit by hand -->",
        f"Measured {results.get('when', '?')} on {results.get('cpus', '?')} CPUs:",
        "",
        "```",
        results.get("command", "python bench/cpu_compare.py"),
        "```",
        "",
    ]
    paired = len(labels) == 2  # a before and an after: their CPU round by round too
    head = "| measure, CPU s (wall s) | " + " | ".join(f"`{label}`" for label in labels) + " |"
    head += " after / before, CPU, each round (median) |" if paired else ""
    lines = [*header, head, "|---|" + "---:|" * (len(labels) + paired)]
    for name in (ORIGINAL, *MEASURES):
        if not all(figures[label].get(name) for label in labels):
            continue  # not measured in this sitting
        cells = []
        for label in labels:
            cpu, wall = med(label, name, 0), med(label, name, 1)
            if name == LIVE:  # its second figure is the states it opened
                cells.append(f"{cpu:.2f} ({wall:,.0f} states)")
                continue
            if name == SHARE:  # milliseconds, and the partitions they were shared by
                cells.append(f"{cpu:.1f} ({wall:,.0f} partitions)")
                continue
            ratio = ""
            if name not in (ORIGINAL, IDLE, IDLE_AGAIN) and figures[labels[0]][ORIGINAL]:
                ratio = f", {cpu / med(labels[0], ORIGINAL, 0):.2f}× the original"
            if name in (CORE, SYNC) and figures[label].get(FLOOR_PROMPTS):
                ratio += f", {cpu / med(label, FLOOR_PROMPTS, 0):.1f}× the floor + prompts"
            cells.append(f"{cpu:.2f} ({wall:.2f}){ratio}")
        if paired:
            before, after = (figures[label][name] for label in labels)
            ratios = [a[0] / b[0] for a, b in zip(after, before, strict=True) if b[0] > 0]
            shown = ", ".join(f"{r:.2f}" for r in ratios)
            cells.append(f"{shown} ({statistics.median(ratios):.2f})" if ratios else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if name == EXPORT:  # what a user runs to get a training set from nothing
            cells = []
            for label in labels:
                both = med(label, SYNC, 0) + med(label, EXPORT, 0)
                cells.append(f"{both:.2f}, {both / med(labels[0], ORIGINAL, 0):.2f}× the original")
            if paired:
                cells.append("")
            lines.append("| sync from scratch + export, CPU | " + " | ".join(cells) + " |")
            if figures[labels[0]].get(PEER):
                peer = med(labels[0], PEER, 0)
                cells = [
                    f"{(med(label, SYNC, 0) + med(label, EXPORT, 0)) / peer:.2f}×"
                    for label in labels
                ]
                cells += [""] if paired else []
                lines.append(
                    "| sync from scratch + export, CPU vs the fair peer's | "
                    + " | ".join(cells)
                    + " |"
                )
    lines += _rss_lines(figures, labels, paired)
    lines += _design_floor_lines(figures, labels, paired, med)
    rounds = len(next(iter(figures[labels[0]].values())))
    lines.append("")
    lines.append(
        f"Medians of {rounds} alternated rounds, {results['size']} corpus: CPU seconds (user +"
        " system, with the children waited for), wall seconds in brackets; each ratio is to"
        f" the original's CPU in the first column (`{labels[0]}`). Peak RSS: the largest of"
        " the command's processes (`ru_maxrss` with its waited-for children), the largest"
        " round."
    )
    return "\n".join(lines) + "\n"


def _rss_lines(figures: dict, labels: list[str], paired: bool) -> list[str]:
    """The peak RSS rows, in MB, and sync's and export's against the fair peer's."""

    def peak(label: str, name: str) -> float | None:
        values = [v[2] for v in figures[label].get(name) or () if len(v) > 2]
        return max(values) if values else None

    lines = []
    blank = [""] if paired else []
    for name in RSS_SHOWN:
        peaks = [peak(label, name) for label in labels]
        if None in peaks:
            continue  # not measured in this sitting (or before RSS was kept)
        cells = [f"{mb:,.0f}" for mb in peaks]
        lines.append(f"| peak RSS MB: {name} | " + " | ".join(cells + blank) + " |")
    peer = peak(labels[0], PEER)
    ours = [(peak(label, SYNC), peak(label, EXPORT)) for label in labels]
    if peer and all(None not in pair for pair in ours):
        cells = [f"{max(pair) / peer:.2f}× (1/{peer / max(pair):.1f})" for pair in ours]
        lines.append(
            "| peak RSS of the sync and the export (the larger) vs the fair peer's | "
            + " | ".join(cells + blank)
            + " |"
        )
    return lines


def _design_floor_lines(figures: dict, labels: list[str], paired: bool, med) -> list[str]:
    """The least any sync of this design can cost, from this sitting's own figures: what it
    loads before its work, Dagster's recording at its measured share per partition, and the
    floor + prompts for the work itself (no store, no digests, no report). Against it the
    issue's targets for the sync can be read as possible or not."""
    needed = (LOADED, SHARE, FLOOR_PROMPTS)
    if not all(figures[label].get(name) for label in labels for name in needed):
        return []
    original = med(labels[0], ORIGINAL, 0)
    peer = med(labels[0], PEER, 0) if figures[labels[0]].get(PEER) else None
    cells = []
    for label in labels:
        share_s = med(label, SHARE, 0) * med(label, SHARE, 1) / 1000
        least = med(label, LOADED, 0) + share_s + med(label, FLOOR_PROMPTS, 0)
        vs_peer = f", {least / peer:.2f}× the fair peer" if peer else ""
        cells.append(f"{least:.2f}, {least / original:.2f}× the original{vs_peer}")
    name = (
        "the least a sync of this design costs: what it loads + Dagster's share × partitions"
        " + the floor + prompts, CPU"
    )
    return [f"| {name} | " + " | ".join(cells + ([""] if paired else [])) + " |"]


if __name__ == "__main__":
    sys.exit(main())
