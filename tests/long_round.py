"""Long-run round: the original script against ``statepool sync`` on long and odd runs.

Not collected by pytest (no ``test_`` prefix): run it by hand, under ``nice``::

    nice -n 19 .venv/bin/python tests/long_round.py OUTDIR [--quick] [--only NAME_PART ...]

Each case builds a runs folder, runs the original script
(``../shared/reference/statepool_seed.py`` or ``$STATEPOOL_SEED``) into a fresh folder and
``statepool sync`` on a fresh ``DAGSTER_HOME`` and store, each timed with ``/usr/bin/time
-v`` (wall, peak RSS of the process and its children), and compares the state files: the
same names, byte for byte. Growth cases sync after each step and compare every time.
Prints one row per measured step: case, result (match / DIFF / crash), wall, peak RSS.
The exit code is the number of rows that are not ``match``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

REPO = Path(__file__).resolve().parents[1]
SEED = Path(os.environ.get("STATEPOOL_SEED", REPO.parent / "shared/reference/statepool_seed.py"))
# The original as its users run it: a script under the system's Python.
SEED_PYTHON = os.environ.get("STATEPOOL_SEED_PYTHON", "python3")


@dataclass
class Row:
    case: str
    result: str
    wall: float = 0.0
    rss_mb: float = 0.0
    seed_wall: float = 0.0
    seed_rss_mb: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class Measured:
    rc: int
    wall: float
    rss_mb: float
    stdout: str
    stderr: str


def timed(argv: list[str], env: dict[str, str] | None = None) -> Measured:
    """Run argv under /usr/bin/time -v: exit code, wall seconds, max RSS in MB."""
    with open(os.devnull, "wb") as _:
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-v", *argv], env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - started
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    rss = int(m.group(1)) / 1024 if m else float("nan")
    return Measured(done.returncode, wall, rss, done.stdout, done.stderr)


def run_seed(runs: Path, out: Path) -> Measured:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return timed([SEED_PYTHON, str(SEED), str(runs), str(out)])


class Pipeline:
    """One DAGSTER_HOME and store, synced as often as a case asks."""

    def __init__(self, work: Path, runs: Path):
        self.home, self.store = work / "home", work / "store"
        for path in (self.home, self.store):
            shutil.rmtree(path, ignore_errors=True)
        self.home.mkdir(parents=True)
        shutil.copy(REPO / "dagster.yaml", self.home / "dagster.yaml")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
        env.update(
            DAGSTER_HOME=str(self.home),
            STATEPOOL_RUNS_DIR=str(runs),
            STATEPOOL_STORE_DIR=str(self.store),
            PYTHONPATH=str(REPO),
        )
        self.env = env

    def sync(self) -> Measured:
        return timed([sys.executable, "-m", "statepool_dagster.cli", "sync", "--json"], self.env)

    def states(self) -> dict[str, Path]:
        pool = self.store / "state_pool"
        if not pool.is_dir():
            return {}
        return {p.name: p for p in pool.glob("*/*.json")}

    def part_files(self) -> dict[str, int]:
        """Parquet parts per table folder (asset/run)."""
        counts: dict[str, int] = {}
        for p in self.store.glob("*/*/*.parquet"):
            key = f"{p.parent.parent.name}/{p.parent.name}"
            counts[key] = counts.get(key, 0) + 1
        return counts


def compare(
    seed_out: Path, ours: dict[str, Path], expect_missing: set[str] = frozenset()
) -> list[str]:
    """Differences between the original's state files and ours (names, then bytes)."""
    theirs = {p.name: p for p in seed_out.glob("*.json")}
    problems = []
    only_theirs = sorted(set(theirs) - set(ours) - expect_missing)
    only_ours = sorted(set(ours) - set(theirs))
    if only_theirs:
        problems.append(f"{len(only_theirs)} only in the original: {only_theirs[:5]}")
    if only_ours:
        problems.append(f"{len(only_ours)} only in ours: {only_ours[:5]}")
    differ = []
    for name in sorted(set(theirs) & set(ours)):
        a, b = theirs[name], ours[name]
        if a.stat().st_size != b.stat().st_size or a.read_bytes() != b.read_bytes():
            differ.append(name)
    if differ:
        problems.append(f"{len(differ)} differ: {differ[:5]}")
    return problems


def sync_problems(m: Measured) -> list[str]:
    """A sync that did not exit 0 or reported a failed run."""
    problems = []
    if m.rc != 0:
        problems.append(f"exit {m.rc}: {m.stderr.strip()[-600:]}")
    try:
        summary = json.loads(m.stdout)
    except ValueError:
        return [*problems, f"no JSON summary: {m.stdout[-300:]!r}"]
    if summary.get("failed"):
        errs = [r.get("error") for r in summary.get("runs", []) if not r.get("success")]
        problems.append(f"{summary['failed']} failed runs: {str(errs)[:600]}")
    if "Traceback" in m.stderr:
        problems.append("traceback on stderr: " + m.stderr[m.stderr.find("Traceback") :][:600])
    return problems


def rejects_summary(m: Measured) -> str:
    try:
        summary = json.loads(m.stdout)
    except ValueError:
        return ""
    rej = sum(r.get("rejects", 0) for r in summary.get("runs", []))
    ign = sum(r.get("ignored", 0) for r in summary.get("runs", []))
    return f"rejects={rej} ignored={ign}" if rej or ign else ""


def one_shot(
    name: str, work: Path, build: Callable[[Path], None], expect_ignored: bool = False
) -> list[Row]:
    """Build the runs, run the original and one sync, compare."""
    shutil.rmtree(work, ignore_errors=True)
    runs = work / "runs"
    runs.mkdir(parents=True)
    t0 = time.perf_counter()
    build(runs)
    gen = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in runs.rglob("*") if p.is_file()) / 1e6
    seed = run_seed(runs, work / "seed_out")
    pipe = Pipeline(work, runs)
    ours = pipe.sync()
    problems = sync_problems(ours)
    if seed.rc != 0:
        problems.append(f"original exit {seed.rc}: {seed.stderr.strip()[-300:]}")
    diffs = compare(work / "seed_out", pipe.states())
    result = "crash" if ours.rc != 0 else ("DIFF" if diffs or problems else "match")
    row = Row(name, result, ours.wall, ours.rss_mb, seed.wall, seed.rss_mb)
    row.notes.append(f"input {size:.0f} MB, generated in {gen:.0f} s, {len(pipe.states())} states")
    parts = pipe.part_files()
    if parts:
        row.notes.append(f"max parts per table folder: {max(parts.values())}")
    if note := rejects_summary(ours):
        row.notes.append(note)
    row.notes += problems + diffs
    shutil.rmtree(work / "seed_out", ignore_errors=True)
    shutil.rmtree(pipe.store, ignore_errors=True)
    return [row]


# --- run builders -----------------------------------------------------------------------------


def sample(spec: SampleSpec, name: str = "run000") -> Callable[[Path], None]:
    def build(runs: Path) -> None:
        generate_run(runs / name, spec, 0)

    return build


def _snapshot_text(version: int, n_cards: int, dim: int, rng: random.Random) -> str:
    cards = [
        {
            "card_id": f"c{i:04d}",
            "trigger": f"When v{version} card {i} é {{brace}}",
            "program": f"1. step {rng.random()}",
            "meta_info": {"injected": i, "fired": 0, "helped": 0, "harmful": 0},
            "_trigger_emb": [rng.random() for _ in range(dim)],
        }
        for i in range(n_cards)
    ]
    return json.dumps({"version": version, "cards": cards})


def _episode(version, j: int, pad: str = "") -> str:
    ep = {"id": f"e{version}-{j}", "task": "FPD", "response": "A" + pad, "gt": "A"}
    if version is not ...:
        ep["skill_lib_version"] = version
    return json.dumps(ep, ensure_ascii=False) + "\n"


def odd_versions(runs: Path) -> None:
    """Sparse, huge and zero-padded versions; snapshots without batches and the reverse."""
    rng = random.Random(7)
    layouts = {
        # snapshot versions (as spelled), episode batch versions
        "sparse": (["0", "7", "1000", "999999"], [0, 6, 7, 999, 999998, 5]),
        "eleven_digits": (
            ["12345678901", "12345678902", "99999999999"],
            [12345678900, 12345678902],
        ),
        "leading_zeros": (["007", "7", "08", "010", "10", "0", "00", "000"], [6, 7, 9, 0]),
        "zeros_only_padded": (["007", "0012"], [6, 12]),
        "no_batch": (["0", "1", "2", "5"], [0, 3]),
        "batch_no_snapshot": (["3"], [0, 1, 2, 4, 5]),
        "minus_one_batch": (["0", "1"], [-1]),
        "missing_version_field": (["0", "1", "2"], [..., 1]),
        "int64_edge": (["9223372036854775807", "9223372036854775806"], [9223372036854775806]),
    }
    for run, (snaps, batches) in layouts.items():
        snap_dir = runs / run / "snapshots"
        snap_dir.mkdir(parents=True)
        for spelled in snaps:
            text = _snapshot_text(int(spelled), 3 + len(spelled), 4, rng)
            (snap_dir / f"skills_v{spelled}.json").write_text(text, encoding="utf-8")
        lines = [_episode(v, j) for v in batches for j in range(2)]
        rng.shuffle(lines)  # batches interleaved, as a concurrent agent may write them
        (runs / run / "episodes.jsonl").write_text("".join(lines), encoding="utf-8")


def huge_batch(n_episodes: int) -> Callable[[Path], None]:
    def build(runs: Path) -> None:
        spec = SampleSpec(n_checkpoints=3, n_cards=20, emb_dim=8, episodes_per_batch=n_episodes)
        generate_run(runs / "run000", spec, 0)

    return build


def gigabyte_episodes(total_mb: int, versions: int) -> Callable[[Path], None]:
    """episodes.jsonl of about total_mb spread evenly over many versions (hand-written lines)."""

    def build(runs: Path) -> None:
        run = runs / "bigeps"
        spec = SampleSpec(n_checkpoints=versions, n_cards=10, emb_dim=8, episodes_per_batch=1)
        generate_run(run, spec, 0)  # the snapshots
        per_version = total_mb * 1_000_000 // versions
        pad = "x" * 300
        line_len = len(_episode(0, 0, pad).encode())
        n = max(1, per_version // line_len)
        with open(run / "episodes.jsonl", "w", encoding="utf-8") as f:
            for v in range(versions):
                f.write("".join(_episode(v, j, pad) for j in range(n)))

    return build


def many_runs(n: int) -> Callable[[Path], None]:
    def build(runs: Path) -> None:
        spec = SampleSpec(n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=2)
        for i in range(n):
            generate_run(runs / f"run{i:04d}", spec, i)

    return build


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


# --- main ------------------------------------------------------------------------------------


def cases(quick: bool) -> dict[str, Callable[[Path], list[Row]]]:
    q = quick
    small = dict(n_cards=20, emb_dim=8, episodes_per_batch=8)
    spec_2k = SampleSpec(n_checkpoints=200 if q else 2000, **small)
    spec_5k = SampleSpec(n_checkpoints=500 if q else 5000, **small)
    spec_10k = SampleSpec(n_checkpoints=1000 if q else 10000, **small)
    spec_big = SampleSpec(
        n_checkpoints=150 if q else 1500, n_cards=150, emb_dim=64, episodes_per_batch=32
    )
    spec_480 = SampleSpec(n_checkpoints=480, n_cards=150, emb_dim=64, episodes_per_batch=32)
    return {
        "ckpt2000_small": lambda w: one_shot(
            f"{spec_2k.n_checkpoints} ckpts, 20 cards 8-d", w, sample(spec_2k)
        ),
        "ckpt5000_small": lambda w: one_shot(
            f"{spec_5k.n_checkpoints} ckpts, 20 cards 8-d", w, sample(spec_5k)
        ),
        "ckpt10000_small": lambda w: one_shot(
            f"{spec_10k.n_checkpoints} ckpts, 20 cards 8-d", w, sample(spec_10k)
        ),
        "ckpt480_big": lambda w: one_shot(
            "480 ckpts x 150 cards x 64-d (README's long)", w, sample(spec_480)
        ),
        "ckpt1500_big": lambda w: one_shot(
            f"{spec_big.n_checkpoints} ckpts x 150 cards x 64-d", w, sample(spec_big)
        ),
        "odd_versions": lambda w: one_shot("odd versions (9 runs)", w, odd_versions),
        "huge_batch": lambda w: one_shot(
            f"one batch of {10_000 if q else 100_000} episodes",
            w,
            huge_batch(10_000 if q else 100_000),
        ),
        "gigabyte_episodes": lambda w: one_shot(
            f"episodes.jsonl {100 if q else 1000} MB over {40 if q else 400} versions",
            w,
            gigabyte_episodes(100 if q else 1000, 40 if q else 400),
        ),
        "growth": lambda w: growth("growth", w, 100 if q else 300, 10 if q else 50),
        "edits": lambda w: edits("edits", w, 40 if q else 400),
        "many_runs": lambda w: one_shot(
            f"{50 if q else 500} small runs", w, many_runs(50 if q else 500)
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--quick", action="store_true", help="each case at a tenth of its size")
    parser.add_argument(
        "--only", nargs="*", default=[], help="cases whose name contains one of these"
    )
    args = parser.parse_args()
    if not SEED.is_file():
        raise SystemExit(f"the original script is not at {SEED} (set STATEPOOL_SEED)")
    rows: list[Row] = []
    for key, case in cases(args.quick).items():
        if args.only and not any(part in key for part in args.only):
            continue
        work = args.outdir / key
        try:
            new = case(work)
        except Exception as exc:  # the harness itself: report and go on
            new = [Row(key, "crash", notes=[f"harness: {type(exc).__name__}: {exc}"])]
        for row in new:
            print_row(row)
        rows += new
        shutil.rmtree(work, ignore_errors=True)
    print("\n| case | result | wall s | peak RSS MB | original wall s | original RSS MB |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.case} | {r.result} | {r.wall:.1f} | {r.rss_mb:.0f} "
            f"| {r.seed_wall:.1f} | {r.seed_rss_mb:.0f} |"
        )
    return min(100, sum(r.result != "match" for r in rows))


def print_row(r: Row) -> None:
    print(
        f"{r.case:<55} {r.result:<6} wall {r.wall:7.1f} s  RSS {r.rss_mb:6.0f} MB"
        f"   (original {r.seed_wall:6.1f} s, {r.seed_rss_mb:6.0f} MB)",
        flush=True,
    )
    for note in r.notes:
        print(f"    {note}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
