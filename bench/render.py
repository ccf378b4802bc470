"""The bench's results as Markdown: the common table, PostgreSQL beside SQLite, the targets."""

from __future__ import annotations

from pool_suite import CORE, GROWN, IDLE, ORIGINAL, SYNC, WHOLE_POOL

# Issue 22's targets for the shapes it names (the bench, one run each).
TARGETS = {
    "wide": {"sync_x": 1.0, "core_x": 2.0, "share_ms": 30.0, "status_s": 1.5},
    "huge": {},
}
MEMORY_TARGET_MB = 400
# Huge: each whole-pool command's time per state, against its time per state on wide.
PER_STATE_TARGET_X = 1.5
SENSOR_TARGET_S = 2.0


def by_name(results: dict) -> dict[str, dict]:
    return {m["name"]: m for m in results["measures"]}


def vs_original(results: dict, seconds: float) -> str:
    seed = by_name(results).get(ORIGINAL)
    return f"{seed['seconds'] / seconds:.2f}×" if seed and seconds > 0 else "-"


def render_pool(results: dict) -> str:
    """The corpus, then one row per measured command: time, peak RSS, against the original."""
    spec, states = results["spec"], results["states"]
    lines = [
        f"Corpus: {results['size']} — {spec['n_runs']:,} runs × {spec['n_checkpoints']} "
        f"checkpoints × {spec['n_cards']} cards × {spec['emb_dim']}-d embeddings, batches of "
        f"{spec['episodes_per_batch']}: {results['input_mb']:,.0f} MB, {states:,} states.",
        "",
        "| step | wall s | peak RSS MB | vs original | µs per state |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in results["measures"]:
        per_state = (
            f"{m['seconds'] / states * 1e6:,.0f}" if m["name"] in WHOLE_POOL and states else ""
        )
        lines.append(
            f"| {label(m['name'])} | {m['seconds']:.2f} | {m['peak_rss_mb']:,.0f} | "
            f"{vs_original(results, m['seconds'])} | {per_state} |"
        )
    s = results["sensor"]
    lines.append(
        f"| sensor tick, {s['folders']:,} partitions, nothing changed | {s['unchanged_s']:.2f} | "
        f"| | ({s['unchanged_requests']} requests; first tick {s['unchanged_cold_s']:.2f} s) |"
    )
    lines.append(
        f"| sensor tick, +{s['new']:,} new folders | {s['new_s']:.2f} | | | "
        f"({s['new_requests']} requests) |"
    )
    lines += ["", render_share(results)]
    return "\n".join(lines)


def label(name: str) -> str:
    return {
        CORE: "core alone (`bench/core_only.py`, 2 workers)",
        SYNC: "`statepool sync` from scratch",
        IDLE: "`statepool sync`, nothing changed",
        GROWN: "`statepool sync`, one run grown by one checkpoint",
        ORIGINAL: "the original script",
    }.get(name, f"`{name}`" if name.startswith("statepool") else name)


def render_share(results: dict) -> str:
    """Dagster's share per partition on SQLite, and on PostgreSQL beside it when measured."""
    share = results["dagster_share_ms"]
    if "postgres" not in results:
        return (
            "Dagster's share per partition, (sync − core alone) / runs: "
            f"{share['sqlite']:.0f} ms (SQLite)."
        )
    lines = [
        "| sync | SQLite s | SQLite peak RSS MB | PostgreSQL s | PostgreSQL peak RSS MB |",
        "|---|---:|---:|---:|---:|",
    ]
    on_sqlite = by_name(results)
    for m in results["postgres"]:
        lite = on_sqlite[m["name"]]
        lines.append(
            f"| {label(m['name'])} | {lite['seconds']:.2f} | {lite['peak_rss_mb']:,.0f} | "
            f"{m['seconds']:.2f} | {m['peak_rss_mb']:,.0f} |"
        )
    lines.append(
        f"| Dagster's share per partition, (sync − core alone) / runs | "
        f"{share['sqlite']:.0f} ms | | {share['postgres']:.0f} ms | |"
    )
    return "\n".join(lines)


def render_targets(results: dict) -> str:
    """Issue 22's targets for this shape, each beside this run's figure."""
    target = TARGETS.get(results["size"])
    if target is None:
        return ""
    by = by_name(results)
    seed = by.get(ORIGINAL)
    rows = []
    if seed and "sync_x" in target:
        sync_x = seed["seconds"] / by[SYNC]["seconds"]
        core_x = seed["seconds"] / by[CORE]["seconds"]
        rows += [
            (
                f"sync from scratch ≥ {target['sync_x']:.1f}× the original",
                f"{sync_x:.2f}×",
                sync_x >= target["sync_x"],
            ),
            (
                f"core alone ≥ {target['core_x']:.0f}× the original",
                f"{core_x:.2f}×",
                core_x >= target["core_x"],
            ),
        ]
    if "share_ms" in target:
        share = results["dagster_share_ms"]["sqlite"]
        rows.append(
            (
                f"Dagster's share ≤ {target['share_ms']:.0f} ms per partition",
                f"{share:.0f} ms",
                share <= target["share_ms"],
            )
        )
    if "status_s" in target:
        status = by["statepool status"]["seconds"]
        rows.append(
            (
                f"`statepool status` ≤ {target['status_s']} s",
                f"{status:.2f} s",
                status <= target["status_s"],
            )
        )
    for name in (WHOLE_POOL[0], WHOLE_POOL[1], WHOLE_POOL[4], WHOLE_POOL[5]):
        rss = by[name]["peak_rss_mb"]
        rows.append(
            (
                f"peak RSS of `{name}` ≤ {MEMORY_TARGET_MB} MB",
                f"{rss:,.0f} MB",
                rss <= MEMORY_TARGET_MB,
            )
        )
    tick = results["sensor"]["unchanged_s"]
    rows.append(
        (
            f"sensor tick, {results['sensor']['folders']:,} partitions, nothing changed "
            f"≤ {SENSOR_TARGET_S:.0f} s",
            f"{tick:.2f} s",
            tick <= SENSOR_TARGET_S,
        )
    )
    lines = ["| target (issue 22) | this run | met |", "|---|---:|:---:|"]
    lines += [f"| {t} | {figure} | {'yes' if ok else 'no'} |" for t, figure, ok in rows]
    return "\n".join(lines)


def render_header(results: dict) -> str:
    run = results["run"]
    code = run["code_commit"] + (" (with uncommitted changes)" if run["code_dirty"] else "")
    return "\n".join(
        [
            f"<!-- written by bench/run_bench.py --size {results['size']}; do not edit by hand -->",
            f"Measured {run['when']} on {run['cpus']} CPUs (Python {run['python']}, "
            f"Dagster {run['dagster']}); code measured: `{code}` ({run['code']}), "
            f"bench at `{run['bench_commit']}`. Every figure is one process, timed from outside; "
            f"peak RSS includes its children.",
            "",
            "```",
            f"{run['command']}",
            "```",
        ]
    )


def render_per_state(results: dict, wide: dict, source: str) -> str:
    """Each whole-pool command's time per state here against wide's (the target: ≤ 1.5×)."""
    here, there = by_name(results), by_name(wide)
    lines = [
        f"Time per state against wide (`{source}`, measured {wide['run']['when']}):",
        "",
        f"| command | µs per state here | on wide | ratio | ≤ {PER_STATE_TARGET_X}× |",
        "|---|---:|---:|---:|:---:|",
    ]
    for name in WHOLE_POOL:
        if name not in here or name not in there:
            continue
        a = here[name]["seconds"] / results["states"] * 1e6
        b = there[name]["seconds"] / wide["states"] * 1e6
        ok = "yes" if a <= PER_STATE_TARGET_X * b else "no"
        lines.append(f"| {label(name)} | {a:,.0f} | {b:,.0f} | {a / b:.2f}× | {ok} |")
    return "\n".join(lines)
