"""``python -m tools.hostile_round WORK``: build the mutated runs, run both sides, report."""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
from pathlib import Path

from statepool_dagster.demo.sample_runs import generate_run

from .compare import (
    compare,
    run_original,
    run_original_without_blank_lines,
    run_ours,
    store_rejects,
    store_states,
)
from .registry import DOCUMENTED, MUTATIONS, NO_COMPARE, SECOND

# Each registers its mutations on import, in this order (the order runs are built and shown).
MUTATION_MODULES = ("episodes", "snapshots", "values", "random_growth", "twice")


def main() -> int:
    for module in MUTATION_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    work: Path = args.work
    if work.exists():
        shutil.rmtree(work)
    runs = work / "runs"
    names = [n for n in MUTATIONS if not args.only or any(p in n for p in args.only)]
    for i, name in enumerate(names):
        spec, fn = MUTATIONS[name]
        generate_run(runs / name, spec, i)
        fn(runs / name)
    print(f"{len(names)} run folders built", flush=True)
    flags = 0
    reports: dict[str, dict] = {}
    syncs = []
    if any(n in SECOND for n in names):
        syncs.append(run_ours(runs, work, args.timeout))
        for name in names:
            if name in SECOND:
                SECOND[name](runs / name)
        print("second mutations applied", flush=True)
    originals = {name: run_original(runs, name, work, 120) for name in names}
    for name in names:
        if originals[name]["rc"] != 0 and name not in NO_COMPARE:
            again = run_original_without_blank_lines(runs, name, work, 120)
            if again is not None:
                again["blank_lines"] = True
                originals[name] = again
    print("originals done", flush=True)
    syncs.append(run_ours(runs, work, args.timeout))
    for ours in syncs:
        print(f"sync: rc={ours['rc']} in {ours['seconds']:.0f}s", flush=True)
        if ours["rc"] != 0 or ours["report"] is None:
            print("FLAG sync:", ours["rc"], ours["stderr"][-3000:])
            flags += 1
        if "Traceback" in ours["stderr"]:
            print("FLAG sync stderr has a traceback:", ours["stderr"][-3000:])
            flags += 1
        for row in (ours["report"] or {}).get("runs", []):
            if not row.get("success") or row.get("error"):
                print(f"FLAG {row['run']}: run failed: {row.get('error')}")
                flags += 1
            reports[row["run"]] = row
    for name in names:
        if name in NO_COMPARE:
            print(f"{'ok  ' if name in reports else 'FLAG'} {name} (failures only)")
            flags += name not in reports
            continue
        found = compare(
            name,
            originals[name],
            reports.get(name),
            store_states(work / "store", name),
            store_rejects(work / "store", name),
        )
        if originals[name].get("blank_lines"):
            found.insert(0, ("NOTE", "documented: blank lines skipped; compared without them"))
        if name in DOCUMENTED:
            found = [("NOTE", f"documented: {DOCUMENTED[name]}: {m}") for _, m in found]
        for level, message in found:
            flags += level == "FLAG"
            print(f"{level} {name}: {message}")
        if not found:
            print(f"ok   {name}")
    print(f"{len(names)} runs, {flags} FLAG")
    return min(flags, 100)


if __name__ == "__main__":
    sys.exit(main())
