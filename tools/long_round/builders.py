"""Run folders for the long round: samples, odd versions, huge batches, many runs."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

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
