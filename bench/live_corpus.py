"""The live-pool bench's corpora: a synced store and its sessions folder, by size, cached.

Run-shaped sizes are the wide shape (30 cards × 64-d, batches of 8) in runs of 20
checkpoints; the 100,000-state size is the sessions bench's (``sessions_pool.py``: 8
``StateWriter`` processes, segments of 5,000). Each is written once under
``bench/out/live/<size>/`` (``runs/``, ``sessions/``, ``store/``, ``home/``) and reused
while its ``corpus.json`` is there; a bench run measures on a hard-linked copy of
``sessions/`` so the states it seals never reach the cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from measure import BENCH, REPO, Bench, statepool
from shapes import generate_corpus

sys.path.insert(0, str(REPO))
from statepool_dagster.demo.sample_runs import SampleSpec

SESSION = "bench"  # the session the 100k writers and the bench's probes write into
WIDE = dict(n_cards=30, emb_dim=64, episodes_per_batch=8)


@dataclass(frozen=True)
class Corpus:
    """``runs`` run-shaped runs of 20 checkpoints, or ``session_states`` session states."""

    name: str
    runs: int = 0
    checkpoints: int = 20
    session_states: int = 0
    shape: tuple = tuple(WIDE.items())

    def spec(self) -> SampleSpec:
        return SampleSpec(n_runs=self.runs, n_checkpoints=self.checkpoints, **dict(self.shape))


SIZES = {
    "tiny": Corpus("tiny", runs=3, checkpoints=4, shape=(("n_cards", 8), ("emb_dim", 16))),
    "tiny-sessions": Corpus("tiny-sessions", session_states=400),
    "1k": Corpus("1k", runs=60),  # 1,140 states
    "4k": Corpus("4k", runs=200),  # 3,800 states: the wide corpus
    "11k": Corpus("11k", runs=600),  # 11,400 states
    # The 100k pool's shape, 10× smaller: what its refresh is compared with.
    "10k-sessions": Corpus("10k-sessions", session_states=10_000),
    "100k": Corpus("100k", session_states=100_000),
}


def folder(out: Path, size: str) -> Path:
    return out / "live" / size


def _write_sessions(sessions: Path, states: int) -> None:
    argv = [sys.executable, str(BENCH / "sessions_pool.py"), "--write-only", str(sessions)]
    argv += ["--states", str(states), "--writers", str(min(8, max(1, states // 50)))]
    subprocess.run(argv, check=True, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})


def ensure(out: Path, size: str) -> dict:
    """The corpus of ``size``, generated and synced if not cached; what it is (corpus.json)."""
    corpus, root = SIZES[size], folder(out, size)
    marker = root / "corpus.json"
    if marker.is_file():
        return json.loads(marker.read_text())
    shutil.rmtree(root, ignore_errors=True)
    runs, sessions = root / "runs", root / "sessions"
    runs.mkdir(parents=True)
    sessions.mkdir()
    started = time.perf_counter()
    if corpus.runs:
        generate_corpus(runs, corpus.spec())
    if corpus.session_states:
        _write_sessions(sessions, corpus.session_states)
    generated = time.perf_counter() - started
    # Synced by the bench's own checkout, whatever --code measures: the store is the input.
    bench = Bench(root)
    env = bench.fresh_env("sync", runs)
    env["STATEPOOL_SESSIONS_DIR"] = str(sessions)
    sync = bench.run("sync", statepool("sync", "-q"), env)
    os.replace(root / "sync_store", root / "store")
    os.replace(root / "sync_home", root / "home")
    info = {
        "size": size,
        "runs": corpus.runs,
        "checkpoints": corpus.checkpoints if corpus.runs else 0,
        "shape": dict(corpus.shape) if corpus.runs else "sessions bench (small_state)",
        "session_states": corpus.session_states,
        "generate_s": round(generated, 1),
        "sync_s": round(sync.seconds, 1),
        "store_mb": round(_mb(root / "store")),
    }
    marker.write_text(json.dumps(info, indent=1))
    print(f"corpus {size}: {info}", file=sys.stderr)
    return info


def _mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def scratch_sessions(out: Path, size: str) -> Path:
    """A hard-linked copy of the corpus's sessions folder for one bench run to add to."""
    root = folder(out, size)
    copy = root / "scratch_sessions"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root / "sessions", copy, copy_function=os.link)
    return copy


def main() -> int:
    """``python bench/live_corpus.py SIZE...``: generate and sync, nothing measured."""
    out = BENCH / "out"
    for size in sys.argv[1:]:
        print(json.dumps(ensure(out, size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
