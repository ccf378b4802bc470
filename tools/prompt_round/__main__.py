"""Prompt round: the curator prompt under other templates and inference sides."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from .generation import base_states, make_cases
from .original import load_original
from .syncs import SYNC_CONFIGS, run_syncs
from .worker import run_bulk, worker


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--syncs", type=int, default=len(SYNC_CONFIGS))
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    args = parser.parse_args()
    outdir = args.outdir.resolve()
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / "cases.json").exists():
        parser.error(f"{outdir} is not empty and holds no earlier round: choose another folder")
    shutil.rmtree(outdir, ignore_errors=True)  # an earlier round's
    outdir.mkdir(parents=True)
    seed = load_original()
    bases = base_states(outdir, seed)
    (outdir / "bases.json").write_text(json.dumps(bases, ensure_ascii=False), "utf-8")
    results = run_bulk(outdir, make_cases(args.cases, args.seed, bases), args.timeout)
    results += run_syncs(outdir, args.syncs, seed, args.timeout)
    with (outdir / "findings.jsonl").open("w", encoding="utf-8") as out:
        for r in results:
            out.write(json.dumps(r) + "\n")
    counts: dict[str, int] = {}
    for r in results:
        theirs = "prompt" if r.get("original") == "prompt" else "raises"
        key = f"{r['level']} ours={r.get('ours')} original={theirs}"
        counts[key] = counts.get(key, 0) + 1
        if r["level"] != "OK":
            why = r["why"][:300].encode("utf-8", "backslashreplace").decode("utf-8")
            print(r["level"], r["i"], why, r["classes"], r.get("formatter"))
    for key, n in sorted(counts.items()):
        print(f"{n:6d}  {key}")
    return min(100, sum(r["level"] == "FLAG" for r in results))


if __name__ == "__main__":
    sys.exit(main())
