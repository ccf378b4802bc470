"""The reference's finer measures and the long and short runs, as Markdown."""

from __future__ import annotations

from pool_suite import CORE, ORIGINAL, SYNC
from render import by_name


def render_detail(results: dict) -> str:
    """Incremental syncs and what Dagster and the core pay before any work."""
    inc, g = results["incremental"], results["core_grow"]
    seed = by_name(results).get(ORIGINAL)
    n_runs = results["spec"]["n_runs"]
    sync_s = by_name(results)[SYNC]["seconds"]
    floor, sync_floor = results["dagster_floor"], results["sync_floor"]
    over = sync_s - sync_floor["seconds"]
    tenth = f" (original / 10: {seed['seconds'] / 10:.2f} s)" if seed else ""
    budget = f" (10× the original allows {seed['seconds'] / 10:.2f} s)" if seed else ""
    steps = inc["grow_steps_vs_full_steps"]
    lines = [
        "| incremental | figure |",
        "|---|---:|",
        *(f"| {m['name']} | {m['seconds']:.2f} s |" for m in inc["measures"]),
        f"| +1 run on N synced / that run alone | {inc['add_one_run_vs_alone']:.2f}× |",
        f"| grown run's step time / full step time | {steps:.0%} |" if steps else "",
        f"| a Dagster step that does nothing (a run is one step) | {results['noop_step_s']:.3f} s |",
        f"| `statepool sync` on an empty runs folder, fresh DAGSTER_HOME (the floor) | {sync_floor['seconds']:.2f} s |",
        f"| sync minus the floor | {over:.2f} s{tenth} |",
        f"| Dagster alone: import, fresh instance, one batch run of {n_runs} partitions doing nothing (4 assets, 2 checks each) | {floor['seconds']:.2f} s |",
        f"| its step alone: recording {n_runs} partitions' materializations and checks | {results['dagster_floor_step_s']:.2f} s{budget} |",
        f"| the same for the core alone (no Dagster) | {g['grown_s']:.3f} s / {g['full_s']:.3f} s = {g['grown_s'] / g['full_s']:.0%} |",
        f"| peak RSS of sync, all {n_runs} runs / half of them | {by_name(results)[SYNC]['peak_rss_mb']:.0f} MB / {results['rss_half_runs_mb']:.0f} MB |",
    ]
    return "\n".join(line for line in lines if line)


def floors(results: dict) -> list[dict[str, object]]:
    """Each speed target of the checkpoint issue beside what the design pays before any work."""
    by = by_name(results)
    seed = by[ORIGINAL]["seconds"]
    long_short = results["long_short"]
    short_step = long_short["short"]["scratch_step_s"]
    sync_s = by[SYNC]["seconds"]
    rows = [
        (
            "core alone ≥ 15× the original",
            seed / 15,
            by[CORE]["seconds"],
            results["core_imports"]["seconds"],
            "its imports alone",
        ),
        (
            "statepool sync ≥ 5× the original",
            seed / 5,
            sync_s,
            results["dagster_floor"]["seconds"],
            "Dagster alone: import, fresh instance, the same records, no work",
        ),
        (
            "sync − the floor ≤ original / 10",
            seed / 10,
            sync_s - results["sync_floor"]["seconds"],
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
    for row in results["floors"]:
        mark = " (over)" if row["floor_s"] > row["allowed_s"] else ""
        lines.append(
            f"| {row['target']} | {row['allowed_s']:.2f} | {row['measured_s']:.2f} | "
            f"{row['floor_s']:.2f}{mark} | {row['floor']} |"
        )
    return "\n".join(lines)


def render_long(results: dict) -> str:
    """The long and the short run side by side, and what one more checkpoint costs each."""
    long, short = results["long"], results["short"]
    rows = [
        "| one run | checkpoints | input MB | sync from scratch s | peak RSS MB | idle sync s | grown by one s | absorbing one ckpt s | median step of 3 growths s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in (("long", long), ("short", short)):
        rows.append(
            f"| {label} | {r['checkpoints']} | {r['input_mb']:.0f} | {r['scratch_s']:.2f} | "
            f"{r['scratch_rss_mb']:.0f} | {r['idle_s']:.2f} | {r['grown_s']:.2f} | "
            f"{r['absorb_s']:.2f} | {r['grown_step_s']:.3f} |"
        )
    ratio, step = results["absorb_long_vs_short"], results["absorb_long_vs_short_step"]
    grown = results["grown_step_long_vs_short"]
    one = results["dagster_one_partition_step_s"]
    rows += [
        "",
        f"A new checkpoint's Dagster step, long / short (median of three growths in a row): "
        f"{grown:.2f}× (issue 22's target ≤ 1.2×)."
        if grown
        else "A new checkpoint's Dagster step: too fast to compare at this size.",
        "",
        f"Absorbing one checkpoint (grown − idle wall time), long / short: {ratio:.2f}×; "
        f"long / the short run's from-scratch step time ({short['scratch_step_s']:.2f} s): {step:.0%}."
        if ratio is not None and step is not None
        else "Absorbing one checkpoint: too fast to compare at this size.",
        "",
        "Dagster's own part of absorbing one: a step that does nothing but record one partition "
        f"of the same four assets and two checks takes {one:.2f} s "
        f"({one / short['scratch_step_s']:.0%} of the short run's step), "
        "before the run around it is created and finished.",
    ]
    return "\n".join(rows)
