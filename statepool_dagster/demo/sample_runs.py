"""Deterministic generator of sample runs of a self-evolving skill-library agent.

A *run* mimics an agent answering OVO-Bench streaming-video questions while a curator
evolves its skill library. Layout under a run directory::

    episodes.jsonl                 one episode per line
    snapshots/skills_v<k>.json     {"version": k, "cards": [card, ...]}

The library at version ``k`` served the batch of episodes tagged ``skill_lib_version == k``;
the curator then produced version ``k + 1`` from version ``k`` and that batch's outcomes.
Every checkpoint is a pure function of ``(spec, run_index, version)`` and the previous
library, so growing a run with :func:`append_checkpoint` reproduces :func:`generate_run`
byte for byte.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .cards import _Card, _snapshot_bytes
from .checkpoints import RunCheckpoints, SampleSpec
from .pools import TASKS

__all__ = [
    "SNAPSHOT_RE",
    "TASKS",
    "SampleSpec",
    "append_checkpoint",
    "generate_run",
    "generate_runs",
]


SNAPSHOT_RE = re.compile(r"skills_v(\d+)\.json")


def _snapshot_versions(snap_dir: Path) -> list[int]:
    """Sorted versions of files named exactly ``skills_v<k>.json`` in ``snap_dir``."""
    if not snap_dir.is_dir():
        return []
    out = []
    for p in snap_dir.iterdir():
        m = SNAPSHOT_RE.fullmatch(p.name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def generate_run(run_dir: str | os.PathLike, spec: SampleSpec, run_index: int = 0) -> Path:
    """Write one run directory (episodes.jsonl + snapshots/).

    Stale ``skills_v<k>.json`` files in the snapshot folder are removed first.
    """
    run_dir = Path(run_dir)
    snap_dir = run_dir / "snapshots"
    snap_dir.mkdir(parents=True, exist_ok=True)
    for p in list(snap_dir.iterdir()):
        if SNAPSHOT_RE.fullmatch(p.name):
            p.unlink()
    ctx = RunCheckpoints(spec, run_index, run_dir.name)
    lines: list[str] = []
    cards: list[_Card] = []
    stats: dict[int, list[int]] = {}
    for k in range(spec.n_checkpoints):
        cards = ctx.initial_library() if k == 0 else ctx.next_library(cards, k, stats)
        (snap_dir / f"skills_v{k}.json").write_bytes(_snapshot_bytes(k, cards))
        batch, stats = ctx.episodes(cards, k)
        lines.extend(batch)
    (run_dir / "episodes.jsonl").write_bytes("".join(lines).encode("utf-8"))
    return run_dir


def generate_runs(root: str | os.PathLike, spec: SampleSpec | None = None) -> list[Path]:
    """Write spec.n_runs runs under root (default: ``SampleSpec()``); return their directories
    (sorted)."""
    spec = spec or SampleSpec()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    dirs = [
        generate_run(root / f"{spec.run_prefix}{i:03d}", spec, run_index=i)
        for i in range(spec.n_runs)
    ]
    return sorted(dirs)


def append_checkpoint(run_dir: str | os.PathLike, spec: SampleSpec, run_index: int = 0) -> int:
    """Grow a generated run by one checkpoint; return the new snapshot version.

    With ``n`` existing snapshots (versions ``0..n-1``), writes ``skills_v<n>.json`` derived
    from version ``n - 1`` (whose episode batch is regenerated in memory for the meta
    counters) and appends a batch of episodes tagged ``skill_lib_version == n``.
    """
    run_dir = Path(run_dir)
    snap_dir = run_dir / "snapshots"
    versions = _snapshot_versions(snap_dir)
    n = len(versions)
    if versions != list(range(n)):
        raise ValueError(f"snapshots in {snap_dir} are not contiguous from 0: {versions}")
    snap_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunCheckpoints(spec, run_index, run_dir.name)
    if n == 0:
        cards = ctx.initial_library()
    else:
        prev = ctx.load_library(snap_dir / f"skills_v{n - 1}.json")
        _, stats = ctx.episodes(prev, n - 1)
        cards = ctx.next_library(prev, n, stats)
    (snap_dir / f"skills_v{n}.json").write_bytes(_snapshot_bytes(n, cards))
    batch, _ = ctx.episodes(cards, n)
    with open(run_dir / "episodes.jsonl", "ab") as f:
        f.write("".join(batch).encode("utf-8"))
    return n
