"""The live-pool bench's page (``docs/performance/live.md``) from its figures (``live.json``).

One table per name the figures were filed under (``before``: the pool before issue 31;
``current``: this checkout's), a column per size and place (local disk, moto's S3 server),
then the issue's targets against the current figures.
"""

from __future__ import annotations

from collections.abc import Callable

Row = tuple[str, Callable[[dict, dict], str]]


def _num(value: object, digits: int = 2) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, int | float):
        return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"
    return str(value)


def _ratio(f: dict) -> str:
    vs = f.get("refresh_vs_smaller")
    return f"{vs['ratio']}× ({vs['states']:,})" if vs and vs["ratio"] is not None else "—"


def _fresh(f: dict) -> str:
    if "fresh_p50_s" not in f:
        return "never without a sync"
    seen = f"{f['probes_seen']}/{f['probes']}"
    return f"{_num(f['fresh_p50_s'])} / {_num(f['fresh_p99_s'])} ({seen})"


def _verl(f: dict) -> str:
    verl = f.get("verl")
    if not verl:
        return "—"
    return (
        f"{_num(verl['open_seconds'])} / {_num(verl['on_batch_end_median'], 3)} "
        f"({_num(verl['on_batch_end_max'], 3)}); RssAnon {_num(verl['rss_anon_mb_max'], 0)} MB"
    )


def _rows(figures: dict, f: dict) -> str:
    check = f.get("rows_vs_export") or (f is figures["local"] and figures.get("rows_vs_export"))
    if not check:
        return "—"
    if check["same"]:
        of = f" (a sample of {check['exported']:,})" if check.get("sample") else ""
        return f"same: {check['rows_equal']:,} rows{of}"
    differing = ", ".join(f"{k} {v:,}" for k, v in sorted(check["fields_differing"].items()))
    return (
        f"{check['rows_equal']:,}/{check['exported']:,} equal; only served "
        f"{check['only_served']:,}, only exported {check['only_exported']:,}"
        + (f"; differing: {differing}" if differing else "")
    )


ROWS: list[Row] = [
    ("states served", lambda _, f: _num(f["states"])),
    ("open: `LivePool(...).refresh(force=True)`, s", lambda _, f: _num(f["open_s"])),
    (
        "rows read (every row; on S3 at most `--s3-read-limit`): s (µs a row)",
        lambda _, f: f"{f['rows']:,}: {_num(f['read_all_s'])} ({f['read_row_us']:,.0f})",
    ),
    ("refresh, nothing new, s", lambda _, f: _num(f["refresh_idle_s"], 3)),
    ("refresh after one new 5-state segment, s", lambda _, f: _num(f["refresh_new_segment_s"], 3)),
    ("… against the next smaller pool (its states)", lambda _, f: _ratio(f)),
    ("RssAnon after open, MB", lambda _, f: _num(f["rss_anon_open_mb"], 0)),
    ("peak RssAnon while serving, MB", lambda _, f: _num(f["rss_anon_peak_mb"], 0)),
    (
        "peak RssAnon in a refresh, MB",
        lambda _, f: _num(f["rss_anon_peak_by_phase_mb"].get("refresh"), 0),
    ),
    (
        "peak RSS (VmHWM) after open / after the refreshes, MB",
        lambda _, f: f"{_num(f['vm_hwm_open_mb'], 0)} / {_num(f['vm_hwm_refresh_mb'], 0)}",
    ),
    ("sealed → served p50 / p99, s (probes seen)", lambda _, f: _fresh(f)),
    ("rows vs `statepool export --format verl`", _rows),
    (
        "verl `LiveRLDataset`: open, s / `on_batch_end` after a new segment, median (max), s",
        lambda _, f: _verl(f),
    ),
    ("serving process, wall s (with probes)", lambda _, f: _num(f["process_s"])),
]


def _columns(sizes: dict) -> list[tuple[str, dict, dict]]:
    columns = []
    for size, figures in sizes.items():
        for where in ("local", "s3"):
            if where in figures:
                label = f"{size} ({'S3' if where == 's3' else 'local'})"
                columns.append((label, figures, figures[where]))
    return columns


def table(run: dict) -> list[str]:
    columns = _columns(run["sizes"])
    lines = [
        "| measure | " + " | ".join(c[0] for c in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for label, cell in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(fig, f) for _, fig, f in columns) + " |")
    return lines


def _by_states(run: dict, where: str = "local") -> dict[int, dict]:
    return {f[where]["states"]: f for f in run["sizes"].values() if where in f}


def targets(run: dict) -> list[str]:
    """The issue's targets against this run's figures, where it measured them."""
    local = sorted(_by_states(run).items())
    if not local:
        return []
    states, largest = local[-1]
    f = largest["local"]
    lines = [
        f"| target (issue 31) | this run ({states:,} states unless said) | met |",
        "|---|---:|:---:|",
    ]

    def add(target: str, value: float | None, limit: float, text: str | None = None) -> None:
        met = "—" if value is None else ("yes" if value <= limit else "no")
        lines.append(f"| {target} | {text or _num(value)} | {met} |")

    runs = [(n, g) for n, g in local if g["corpus"]["runs"]]  # the run-shaped pools
    for n, figs in runs:
        if 10_000 <= n < 50_000:
            anon = figs["local"]["rss_anon_peak_mb"]
            add(f"peak RssAnon ≤ 300 MB at {n:,}", anon, 300, f"{anon:,.0f} MB")
            small = [g for m, g in runs if m * 5 < n]
            if small:
                ratio = anon / small[-1]["local"]["rss_anon_peak_mb"]
                add(
                    f"… ≤ 1.5× the {small[-1]['local']['states']:,}-state pool's",
                    ratio,
                    1.5,
                    f"{ratio:.2f}×",
                )
    if states >= 50_000:
        add("peak RssAnon ≤ 400 MB", f["rss_anon_peak_mb"], 400, f"{f['rss_anon_peak_mb']:,.0f} MB")
        add("open ≤ 10 s", f["open_s"], 10)
        seconds = f["refresh_new_segment_s"]
        add("refresh after one new 5-state segment ≤ 0.2 s", seconds, 0.2, _num(seconds, 3))
    for n, figs in local:
        vs = figs["local"].get("refresh_vs_smaller")
        if vs and vs["ratio"] is not None:
            add(
                f"refresh after a new segment at {n:,} ≤ 1.5× its cost at {vs['states']:,}",
                vs["ratio"],
                1.5,
                f"{vs['ratio']}×",
            )
    p99 = [g["local"].get("fresh_p99_s") for _, g in local]
    if p99 and None not in p99:
        add("sealed → served p99 ≤ 2 s local (every size)", max(p99), 2)
    s3 = [g["s3"].get("fresh_p99_s") for g in run["sizes"].values() if "s3" in g]
    if s3 and None not in s3:
        add("sealed → served p99 ≤ 5 s on moto's S3 server (every size)", max(s3), 5)
    verl = f.get("verl_on_batch_end_s")
    if verl is not None:
        add("verl `on_batch_end` after one new segment ≤ 0.5 s", verl, 0.5)
    checks = [f.get("rows_vs_export") for _, _, f in _columns(run["sizes"])]
    same = [c["same"] for c in checks if c]
    if same:
        lines.append(
            f"| rows served = `statepool export --format verl` (every size and place) | {sum(same)}/{len(same)} | {'yes' if all(same) else 'no'} |"
        )
    return lines


def header(name: str, run: dict) -> list[str]:
    info = run["run"]
    dirty = ", with uncommitted changes" if info.get("code_dirty") else ""
    return [
        f"# {name}",
        "",
        f"Measured {info['when']} on {info['cpus']} CPUs (Python {info['python']}); code "
        f"measured: `{info['code_commit']}` at {info['code']}{dirty}; bench at "
        f"`{info['bench_commit']}`; the whole run took {info.get('bench_s', '?')} s.",
        "",
        "```\n" + "\n".join(info.get("commands", [info["command"]])) + "\n```",
        "",
    ] + (OLD_NOTE if _old(run) else [])


OLD_NOTE = [
    "This pool has no sessions folder and no `len`/`[]`: the bench reads `len(pool.rows)` and",
    "each row as the export writes it from `pool.rows[i]`; its change is a table index",
    "rewritten (its mtime moved: any change re-collects every state), and a sealed segment",
    "reaches it only after a Dagster sync, so it has no freshness probes.",
    "",
]


def _old(run: dict) -> bool:
    return any(f["local"]["api"] == "LivePool(store=...)" for f in run["sizes"].values())


def render(recorded: dict) -> str:
    lines = ["<!-- written by bench/live_pool.py; do not edit by hand -->", ""]
    for name in sorted(recorded, key=lambda n: (n != "before", n)):
        run = recorded[name]
        lines += header(name, run) + table(run) + [""]
        if name != "before":
            lines += [*targets(run), ""]
    return "\n".join(lines).rstrip() + "\n"
