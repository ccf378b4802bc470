"""What ``cpu_compare.py`` measures, by name, and its table: every figure's row, the
ratios, the peak RSS rows and the least a sync of this design costs."""

from __future__ import annotations

import statistics

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
LOADED = "what every building sync imports first: dagster, pyarrow.parquet, the definitions module (loaded.py, no work)"
DAGSTER_ALONE = "Dagster alone: import, instance, one run recording every run partition's four materializations and two checks, no work (dagster_floor.py)"
PARQUET = "import pyarrow.parquet alone (loaded.py --parquet)"
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
    DAGSTER_ALONE,
    PARQUET,
)
# Measures whose peak RSS the table shows (MB, the command and its waited-for children).
RSS_SHOWN = (PEER, SYNC, EXPORT, LOADED)
# Parts of the least a sync costs, not commands a user runs: no ratio to the original.
PARTS = (LOADED, DAGSTER_ALONE, PARQUET)


Figure = tuple[float, ...]  # (cpu, wall) or (cpu, wall, peak RSS MB); SHARE: (ms, partitions)


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
            if name not in (ORIGINAL, IDLE, IDLE_AGAIN, *PARTS) and figures[labels[0]][ORIGINAL]:
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
    """The least any sync of this design can cost, from this sitting's own figures: stock
    Dagster recording as many partitions as the sync built (its import and instance
    included), pyarrow's Parquet loaded, and the floor + prompts for the work itself (no
    store, no digests, no report). Against it the issue's targets for the sync can be read
    as possible or not."""
    needed = (DAGSTER_ALONE, PARQUET, FLOOR_PROMPTS)
    if not all(figures[label].get(name) for label in labels for name in needed):
        return []
    original = med(labels[0], ORIGINAL, 0)
    peer = med(labels[0], PEER, 0) if figures[labels[0]].get(PEER) else None
    cells = []
    for label in labels:
        least = sum(med(label, name, 0) for name in needed)
        vs_peer = f", {least / peer:.2f}× the fair peer" if peer else ""
        cells.append(f"{least:.2f}, {least / original:.2f}× the original{vs_peer}")
    name = (
        "the least a sync of this design costs: Dagster alone (above) + import"
        " pyarrow.parquet + the floor + prompts, CPU"
    )
    return [f"| {name} | " + " | ".join(cells + ([""] if paired else [])) + " |"]
