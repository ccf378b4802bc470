"""The live pool as a trainer serves it (issue 31): open, refresh, memory, freshness, rows.

    python bench/live_pool.py --sizes 1k,11k,100k [--s3]          # the pool of this checkout
    python bench/live_pool.py --sizes 1k,4k,11k --code ../base --name before
    python bench/live_pool.py --sizes tiny                         # seconds; tests run it
    python bench/live_pool.py --render                             # the page again, no measuring

Sizes (``live_corpus.py``): ``1k`` 60 runs × 20 checkpoints of the wide shape (1,140
states), ``4k`` 200 runs (3,800), ``11k`` 600 runs (11,400), ``100k`` 100,000 session
states written by 8 ``StateWriter`` processes and synced (the sessions bench's shape);
``tiny`` and ``tiny-sessions`` for tests. Corpora are generated and synced once, cached
under ``bench/out/live/``.

For each size, one serving process (``live_serve.py``, timed from outside as every bench
figure is) opens ``LivePool`` over the store with the sessions folder, reads every row,
refreshes after new 5-state segments sealed by a writer process beside it, and probes
freshness; its rows are checked against ``statepool export --format verl`` of the same
store. With ``--s3`` the store and sessions folder are copied to moto's S3 server on
127.0.0.1 and served from there too. ``--code DIR`` measures another checkout
(``PYTHONPATH=DIR``), ``--name`` files the figures under that name. Every run's figures
go to ``bench/out/live/results-<name>.json`` and ``docs/performance/live.json`` (one
entry per name); ``docs/performance/live.md`` is written from the latter.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from live_check import compare, export_digests, served_digests
from live_corpus import SIZES, ensure, folder, scratch_sessions
from live_render import render
from measure import BENCH, REPO, Bench, last_json, statepool
from run_bench import run_info

DOCS = REPO / "docs" / "performance"
# verl lives in its own venv beside .venv (see bench/README.md).
TRAINER_PYTHON = Path(sys.executable).parents[1].parent / ".venv-trainer" / "bin" / "python"
ALL_TRAIN = ("--val-fraction", "0", "--test-fraction", "0")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", default="1k,11k,10k-sessions,100k", help=f"of {', '.join(SIZES)}"
    )
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout measured")
    parser.add_argument("--name", default="current", help="the figures' name on the page")
    parser.add_argument("--s3", action="store_true", help="also serve from moto's S3 server")
    parser.add_argument(
        "--s3-sizes", default=None, help="with --s3, only these sizes on S3 (default: all)"
    )
    parser.add_argument("--probes", type=int, default=20, help="freshness probes per pool")
    parser.add_argument("--refreshes", type=int, default=3, help="new segments, median")
    parser.add_argument(
        "--s3-read-limit", type=int, default=5_000, help="rows read on S3, spread (0: all)"
    )
    parser.add_argument("--out", type=Path, default=BENCH / "out")
    parser.add_argument("--docs", type=Path, default=DOCS, help="where live.md/live.json go")
    parser.add_argument("--no-verl", action="store_true", help="skip verl's on_batch_end")
    parser.add_argument("--trainer-python", type=Path, default=TRAINER_PYTHON)
    parser.add_argument("--render", action="store_true", help="only write the page again")
    return parser.parse_args(argv)


def serve(bench: Bench, store: str, sessions: str, args, digests: Path | None, env=None) -> dict:
    """One serving process (``live_serve.py``): its figures, and its own from outside."""
    argv = [sys.executable, str(BENCH / "live_serve.py"), store, sessions]
    argv += ["--probes", str(args.probes), "--refreshes", str(args.refreshes)]
    if digests:
        argv += ["--digests", str(digests)]
    if env and "AWS_ENDPOINT_URL" in env and args.s3_read_limit:
        argv += ["--read-limit", str(args.s3_read_limit)]
    if env and "AWS_ENDPOINT_URL" in env:
        argv += ["--storage-options", json.dumps(s3_options(env))]
    local = "://" not in store
    # The store read once, untimed, as every bench input is; S3 objects live in moto.
    measure = bench.run("serve", argv, env or bench.env(), inputs=Path(store) if local else None)
    figures = last_json(measure.stdout)
    figures["process_s"] = round(measure.seconds, 2)
    figures["process_peak_rss_mb"] = round(measure.peak_rss_mb)
    return figures


def export(bench: Bench, size: str) -> Path:
    """``statepool export --format verl`` of the size's store, every state in train."""
    out = bench.out / "live" / size / "export"
    bench.discard(out)
    env = bench.env(STATEPOOL_STORE_DIR=str(folder(bench.out, size) / "store"))
    bench.run("export", statepool("export", "--format", "verl", "--out", str(out), *ALL_TRAIN), env)
    return out


def s3_options(env: dict[str, str]) -> dict:
    return {
        "key": env["AWS_ACCESS_KEY_ID"],
        "secret": env["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"endpoint_url": env["AWS_ENDPOINT_URL"], "region_name": "us-east-1"},
    }


def start_s3():
    """moto's S3 server on 127.0.0.1 (``tests/s3server.py``), or a clear message."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from s3server import S3Server
    except ImportError:
        raise SystemExit("--s3 needs tests/s3server.py (moto's server starter)") from None
    return S3Server().start()


def on_s3(bench: Bench, server, size: str, sessions: Path, args, digests: Path) -> dict:
    """The same pool with its store and sessions folder on the S3 server."""
    import s3fs

    bucket = f"live-{size}-{int(time.time())}".lower()
    server.make_bucket(bucket)
    fs = s3fs.S3FileSystem(**s3_options(server.env()))
    started = time.perf_counter()
    fs.put(str(folder(bench.out, size) / "store"), f"{bucket}/store", recursive=True)
    fs.put(str(sessions), f"{bucket}/sessions", recursive=True)
    uploaded = round(time.perf_counter() - started)
    print(f"{size}: uploaded to S3 in {uploaded}s", file=sys.stderr)
    env = bench.env(**server.env())
    figures = serve(bench, f"s3://{bucket}/store", f"s3://{bucket}/sessions", args, digests, env)
    return figures | {"upload_s": uploaded}


def verl_step(bench: Bench, size: str, args) -> dict | None:
    """verl's ``LiveRLDataset``: open, then ``on_batch_end`` after each of 5 new segments."""
    script = BENCH / "live_verl.py"
    if args.no_verl or not script.is_file() or not args.trainer_python.is_file():
        return None
    if bench.code != REPO:  # live_verl.py imports the checkout it is in, not --code
        return None
    sessions = scratch_sessions(bench.out, size)
    argv = [
        str(args.trainer_python),
        str(script),
        "--store",
        str(folder(bench.out, size) / "store"),
    ]
    argv += ["--sessions", str(sessions), "--segments", "5", "--states", "5"]
    measure = bench.run("verl", argv, bench.env(), inputs=None)
    figures = last_json(measure.stdout)
    figures["process_s"] = round(measure.seconds, 2)
    return figures


def measure_size(bench: Bench, size: str, args, server) -> dict:
    corpus = ensure(bench.out, size)
    sessions = scratch_sessions(bench.out, size)
    digests = bench.out / "live" / size / "served.jsonl"
    store = folder(bench.out, size) / "store"
    figures = {"corpus": corpus, "local": serve(bench, str(store), str(sessions), args, digests)}
    exported = export_digests(export(bench, size))
    figures["local"]["rows_vs_export"] = compare(served_digests(digests), exported)
    if corpus["session_states"] >= 50_000 and (verl := verl_step(bench, size, args)):
        figures["local"]["verl"] = verl
        figures["local"]["verl_on_batch_end_s"] = verl["on_batch_end_median"]
    if server is not None and size in (args.s3_sizes or size).split(","):
        sessions = scratch_sessions(bench.out, size)
        figures["s3"] = on_s3(bench, server, size, sessions, args, digests)
        sample = figures["s3"]["rows"] < figures["s3"]["states"]
        figures["s3"]["rows_vs_export"] = compare(served_digests(digests), exported, sample)
    print(f"{size}: {json.dumps(figures)}", file=sys.stderr)
    return figures


def ratios(sizes: dict[str, dict], where: str = "local") -> None:
    """Each size's refresh after a new segment against the next smaller of the same shape."""
    for figures in sizes.values():
        figures.get(where, {}).pop("refresh_vs_smaller", None)
    for sessions in (False, True):
        shaped = [f for f in sizes.values() if bool(f["corpus"]["session_states"]) == sessions]
        _pairs(sorted(shaped, key=lambda f: f[where]["states"] if where in f else 0), where)


def _pairs(ordered: list[dict], where: str) -> None:
    for small, large in itertools.pairwise(ordered):
        if where in small and where in large:
            a = small[where]["refresh_new_segment_s"]
            b = large[where]["refresh_new_segment_s"]
            large[where]["refresh_vs_smaller"] = {
                "states": small[where]["states"],
                "ratio": round(b / a, 2) if a else None,
            }


def merged(earlier: dict | None, run: dict) -> dict:
    """A run of the same code under the same name adds its sizes to the earlier run's."""
    same = earlier and earlier["run"]["code_commit"] == run["run"]["code_commit"]
    if not same or run["run"]["code_dirty"] or earlier["run"]["code_dirty"]:
        return run
    if earlier["sizes"].keys() <= run["sizes"].keys():  # every earlier size measured again
        return run
    commands = earlier["run"].get("commands", [earlier["run"]["command"]])
    info = run["run"] | {"commands": [*commands, run["run"]["command"]]}
    info["bench_s"] += earlier["run"].get("bench_s", 0)
    sizes = {k: v for k, v in earlier["sizes"].items() if k not in run["sizes"]}
    return {"run": info, "sizes": sizes | run["sizes"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    page, store = args.docs / "live.md", args.docs / "live.json"
    recorded = json.loads(store.read_text()) if store.is_file() else {}
    if args.render:
        for entry in recorded.values():  # figures filed before pairs were by shape
            ratios(entry["sizes"])
            ratios(entry["sizes"], "s3")
        page.write_text(render(recorded), encoding="utf-8")
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise SystemExit(f"unknown size(s) {', '.join(unknown)}: choose from {', '.join(SIZES)}")
    bench = Bench(args.out, code=args.code.resolve())
    info = run_info(bench, sys.argv[1:])
    info["command"] = info["command"].replace("run_bench.py", "live_pool.py")
    server = start_s3() if args.s3 else None
    started = time.perf_counter()
    try:
        result = {size: measure_size(bench, size, args, server) for size in sizes}
    finally:
        if server is not None:
            server.stop()
    info["bench_s"] = round(time.perf_counter() - started)
    run = {"run": info, "sizes": result}
    ratios(result)
    ratios(result, "s3")
    (args.out / "live").mkdir(parents=True, exist_ok=True)
    (args.out / "live" / f"results-{args.name}.json").write_text(json.dumps(run, indent=1))
    entry = merged(recorded.get(args.name), run)
    entry["sizes"] = dict(sorted(entry["sizes"].items(), key=lambda kv: kv[1]["local"]["states"]))
    ratios(entry["sizes"])
    ratios(entry["sizes"], "s3")
    recorded[args.name] = entry
    args.docs.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    page.write_text(render(recorded), encoding="utf-8")
    print(json.dumps(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
