"""Runs grown and edited between syncs, each step compared with the original."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

from .runner import Pipeline, Row, compare, rejects_summary, run_seed, sync_problems

# --- growth -----------------------------------------------------------------------------------


def growth(name: str, work: Path, base: int, grow: int) -> list[Row]:
    """A run grown one checkpoint at a time, synced and compared each time; then edits."""
    shutil.rmtree(work, ignore_errors=True)
    runs = work / "runs"
    spec = SampleSpec(n_checkpoints=base, n_cards=20, emb_dim=8, episodes_per_batch=8)
    run = generate_run(runs / "run000", spec, 0)
    pipe = Pipeline(work, runs)
    rows: list[Row] = []
    seed_out = work / "seed_out"

    def step(label: str, expect_missing: set[str] = frozenset()) -> Row:
        seed = run_seed(runs, seed_out)
        ours = pipe.sync()
        problems = sync_problems(ours) + compare(seed_out, pipe.states(), expect_missing)
        result = "crash" if ours.rc != 0 else ("DIFF" if problems else "match")
        row = Row(f"{name}: {label}", result, ours.wall, ours.rss_mb, seed.wall, seed.rss_mb)
        parts = pipe.part_files()
        row.notes.append(
            f"{len(pipe.states())} states; parts per table: "
            + ", ".join(f"{k.split('/')[0]}={v}" for k, v in sorted(parts.items()))
        )
        if note := rejects_summary(ours):
            row.notes.append(note)
        row.notes += problems
        return row

    rows.append(step(f"scratch ({base} ckpts)"))
    grow_rows = []
    for _ in range(grow):
        append_checkpoint(run, spec, 0)
        grow_rows.append(step("grown"))
    if grow_rows:
        walls = [r.wall for r in grow_rows]
        worst = [r for r in grow_rows if r.result != "match"]
        summary = Row(
            f"{name}: grown x{grow} (each synced)",
            worst[0].result if worst else "match",
            sum(walls) / len(walls),
            max(r.rss_mb for r in grow_rows),
            sum(r.seed_wall for r in grow_rows) / len(grow_rows),
            max(r.seed_rss_mb for r in grow_rows),
        )
        summary.notes.append(
            f"wall mean/first/last/max {summary.wall:.2f}/{walls[0]:.2f}/"
            f"{walls[-1]:.2f}/{max(walls):.2f} s"
        )
        summary.notes += grow_rows[-1].notes
        for r in worst[:3]:
            summary.notes += [f"[{grow_rows.index(r)}] " + n for n in r.notes]
        rows.append(summary)

    n_now = base + grow
    # In-place rewrite of an old snapshot: a card's text changed, same file name.
    old = run / "snapshots" / f"skills_v{n_now // 3}.json"
    lib = json.loads(old.read_text(encoding="utf-8"))
    lib["cards"][0]["trigger"] = "rewritten in place: " + lib["cards"][0]["trigger"]
    old.write_text(json.dumps(lib, ensure_ascii=False), encoding="utf-8")
    rows.append(step(f"old snapshot v{n_now // 3} rewritten"))

    # In-place rewrite of an episode line in the middle, same length (size unchanged).
    eps = run / "episodes.jsonl"
    lines = eps.read_bytes().splitlines(keepends=True)
    mid = len(lines) // 2
    before = lines[mid]
    ep = json.loads(before)
    ep["response"] = "B" if ep["response"] != "B" else "C"
    after = (json.dumps(ep, ensure_ascii=False) + "\n").encode()
    assert len(after) == len(before)
    st = eps.stat()
    lines[mid] = after
    with open(eps, "r+b") as f:  # in place, as an editor saving over it would
        f.write(b"".join(lines))
    os.utime(eps, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    rows.append(step(f"episode line {mid + 1} edited in place (same size)"))

    # Delete a middle snapshot: its state must go (the original from scratch has none).
    gone = run / "snapshots" / f"skills_v{n_now // 2}.json"
    gone.unlink()
    rows.append(step(f"snapshot v{n_now // 2} deleted"))

    # Delete the episode batch of one version: the state that took it now pairs otherwise.
    kv = n_now // 4
    lines = eps.read_bytes().splitlines(keepends=True)
    kept = [ln for ln in lines if json.loads(ln).get("skill_lib_version") != kv]
    eps.write_bytes(b"".join(kept))
    rows.append(step(f"episode batch v{kv} deleted"))
    rows.append(same_as_fresh(f"{name}: tables equal a fresh sync's", work, runs, pipe))
    shutil.rmtree(seed_out, ignore_errors=True)
    return rows


def edits(name: str, work: Path, base: int) -> list[Row]:
    """Edits a writer may make to a long run between syncs, each synced and compared."""
    shutil.rmtree(work, ignore_errors=True)
    runs = work / "runs"
    spec = SampleSpec(n_checkpoints=base, n_cards=5, emb_dim=4, episodes_per_batch=4)
    run = generate_run(runs / "run000", spec, 0)
    eps, snaps = run / "episodes.jsonl", run / "snapshots"
    pipe = Pipeline(work, runs)
    saved: dict[str, bytes] = {}

    def late_line(v: int) -> Callable[[], None]:
        def edit() -> None:
            with open(eps, "a", encoding="utf-8") as f:
                f.write(json.dumps({"id": f"late{v}", "response": "Z", "skill_lib_version": v}))
                f.write("\n")

        return edit

    def move(src: str, dst: str) -> Callable[[], None]:
        return lambda: (snaps / src).rename(snaps / dst)

    def remove(file: str) -> Callable[[], None]:
        def edit() -> None:
            saved[file] = (snaps / file).read_bytes()
            (snaps / file).unlink()

        return edit

    def restore(file: str) -> Callable[[], None]:
        return lambda: (snaps / file).write_bytes(saved[file])

    def drop_batch(v: int) -> Callable[[], None]:
        def edit() -> None:
            lines = eps.read_bytes().splitlines(keepends=True)
            eps.write_bytes(b"".join(x for x in lines if json.loads(x)["skill_lib_version"] != v))

        return edit

    def truncate() -> None:
        eps.write_bytes(b"".join(eps.read_bytes().splitlines(keepends=True)[:-3]))

    def touch() -> None:
        p = snaps / "skills_v5.json"
        p.write_bytes(p.read_bytes())

    mid, last = base // 2, base - 1
    steps: list[tuple[str, Callable[[], None]]] = [
        ("scratch", lambda: None),
        (f"late line for v{mid}", late_line(mid)),
        ("late line for v0", late_line(0)),
        (f"late line for v{last} (the last batch)", late_line(last)),
        ("grown", lambda: append_checkpoint(run, spec, 0)),
        ("v3 respelled v03", move("skills_v3.json", "skills_v03.json")),
        (
            "v4 doubled as v004 (a copy, fewer cards)",
            lambda: (snaps / "skills_v004.json").write_text(
                json.dumps({"version": 4, "cards": []}), encoding="utf-8"
            ),
        ),
        (f"last snapshot v{last + 1} deleted", remove(f"skills_v{last + 1}.json")),
        (f"v{mid} deleted", remove(f"skills_v{mid}.json")),
        (f"v{mid} restored", restore(f"skills_v{mid}.json")),
        (f"v{last + 1} restored", restore(f"skills_v{last + 1}.json")),
        ("batch v0 dropped", drop_batch(0)),
        ("episodes.jsonl truncated by 3 lines", truncate),
        ("v5 rewritten with the same bytes", touch),
    ]
    rows = []
    for label, edit in steps:
        edit()
        seed = run_seed(runs, work / "seed_out")
        ours = pipe.sync()
        problems = sync_problems(ours) + compare(work / "seed_out", pipe.states())
        result = "crash" if ours.rc != 0 else ("DIFF" if problems else "match")
        row = Row(f"{name}: {label}", result, ours.wall, ours.rss_mb, seed.wall, seed.rss_mb)
        if note := rejects_summary(ours):
            row.notes.append(note)
        row.notes += problems
        rows.append(row)
    rows.append(same_as_fresh(f"{name}: tables equal a fresh sync's", work, runs, pipe))
    return rows


# What the state files do not show: reference ops and prompts, grown against built fresh.
COMPARED = {
    "checkpoint_states": ["state_id", "state", "reference_ops", "batch_version", "n_episodes"],
    "curator_prompts": ["state_id", "prompt", "reference_ops", "state_key"],
    "run_episodes": ["line", "version", "record"],
    "skill_snapshots": ["version", "library"],
}


def same_as_fresh(label: str, work: Path, runs: Path, grown: Pipeline) -> Row:
    """A fresh sync of the same files: every table of the grown store must be equal."""
    from statepool_dagster.core.store.layout import StoreLayout
    from statepool_dagster.core.store.reading import read_run_table

    fresh = Pipeline(work / "fresh", runs)
    m = fresh.sync()
    problems = sync_problems(m)
    for run in sorted(p.name for p in runs.iterdir()):
        for asset, columns in COMPARED.items():
            a = read_run_table(StoreLayout(grown.store), asset, run, columns)
            b = read_run_table(StoreLayout(fresh.store), asset, run, columns)
            if not a.equals(b):
                problems.append(
                    f"{run}/{asset}: {a.num_rows} rows grown, {b.num_rows} fresh, differ"
                )
    row = Row(label, "DIFF" if problems else "match", m.wall, m.rss_mb)
    row.notes += problems
    shutil.rmtree(work / "fresh", ignore_errors=True)
    return row
