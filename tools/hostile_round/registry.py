"""The mutation registry, the sample specs, and the helpers that edit a run folder."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec

REPO = Path(__file__).resolve().parents[2]
SEED = Path(os.environ.get("STATEPOOL_SEED", REPO.parent / "shared/reference/statepool_seed.py"))
STATEPOOL = Path(sys.executable).with_name("statepool")
SMALL = SampleSpec(n_checkpoints=3, n_cards=2, emb_dim=3, episodes_per_batch=2)
# Snapshots past the reader's 512 KB fast-path threshold (embedding arrays blanked first).
BIG = SampleSpec(n_checkpoints=3, n_cards=4, emb_dim=40000, episodes_per_batch=2)

Mutation = Callable[[Path], None]
MUTATIONS: dict[str, tuple[SampleSpec, Mutation]] = {}
# Applied after a first `statepool sync` of the mutated run; the second sync is compared.
SECOND: dict[str, Mutation] = {}
# Runs whose states differ from the original's by design (sidecars): only checked for
# failures, hangs and tracebacks.
NO_COMPARE: set[str] = set()
# Divergences the input rules (docs/input-rules.md) list (the run name: the row).
DOCUMENTED = {
    "ep_lf_cr_mix": "blank lines are skipped (the original crashes on them)",
    "ep_whitespace_only": "blank lines are skipped (the original crashes on them)",
    "ep_blank_lines_between": "blank lines are skipped (the original crashes on them)",
    "g_blank_then_grown": "blank lines are skipped (the original crashes on them)",
}


def mutation(name: str, spec: SampleSpec = SMALL):
    def register(fn: Mutation) -> Mutation:
        MUTATIONS[name] = (spec, fn)
        return fn

    return register


# --- helpers --------------------------------------------------------------------------------


def _eps(run: Path) -> Path:
    return run / "episodes.jsonl"


def _snap(run: Path, k: int = 1) -> Path:
    return run / "snapshots" / f"skills_v{k}.json"


def _lines(run: Path) -> list[bytes]:
    return _eps(run).read_bytes().splitlines(keepends=True)


def _set_lines(run: Path, lines: list[bytes]) -> None:
    _eps(run).write_bytes(b"".join(lines))


def _splice_episode(run: Path, index: int, field: str, raw: bytes) -> None:
    """Line ``index`` (0-based) with ``field``'s value replaced by raw JSON bytes."""
    lines = _lines(run)
    record = json.loads(lines[index])
    record[field] = "@@MARK@@"
    text = json.dumps(record, ensure_ascii=False).encode()
    lines[index] = text.replace(b'"@@MARK@@"', raw) + b"\n"
    _set_lines(run, lines)


def _raw_episode_line(run: Path, index: int, raw: bytes) -> None:
    """Insert a whole raw line (no line end added) before line ``index`` (0-based)."""
    lines = _lines(run)
    lines.insert(index, raw)
    _set_lines(run, lines)


def _splice_snapshot(run: Path, k: int, edit: Callable[[dict], None], raws: dict[str, bytes]):
    """Snapshot ``k`` re-written with ``edit`` applied, then string markers replaced by raw."""
    lib = json.loads(_snap(run, k).read_bytes())
    edit(lib)
    text = json.dumps(lib, ensure_ascii=False).encode()
    for marker, raw in raws.items():
        text = text.replace(json.dumps(marker).encode(), raw)
    _snap(run, k).write_bytes(text)


def _card_field(k: int, field: str, raw: bytes, card: int = 0) -> Mutation:
    def apply(run: Path) -> None:
        def edit(lib):
            lib["cards"][card][field] = "@@MARK@@"

        _splice_snapshot(run, k, edit, {"@@MARK@@": raw})

    return apply


def _top_field(k: int, field: str, raw: bytes) -> Mutation:
    def apply(run: Path) -> None:
        def edit(lib):
            lib[field] = "@@MARK@@"

        _splice_snapshot(run, k, edit, {"@@MARK@@": raw})

    return apply


def _snap_bytes(k: int, transform: Callable[[bytes], bytes]) -> Mutation:
    def apply(run: Path) -> None:
        _snap(run, k).write_bytes(transform(_snap(run, k).read_bytes()))

    return apply


def _eps_bytes(transform: Callable[[bytes], bytes]) -> Mutation:
    def apply(run: Path) -> None:
        _eps(run).write_bytes(transform(_eps(run).read_bytes()))

    return apply


# --- episodes.jsonl ------------------------------------------------------------------------
