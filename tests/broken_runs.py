"""A runs folder mixing good runs with every broken case real runs produce."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

SPEC = SampleSpec(n_checkpoints=4, n_cards=4, emb_dim=4, episodes_per_batch=3)


@dataclass
class Corpus:
    runs: Path
    # run -> {1-based line number of a rejected episode line: expected error fragment}
    bad_lines: dict[str, dict[int, str]] = field(default_factory=dict)
    # run -> {snapshot file name: expected error fragment}
    bad_snapshots: dict[str, dict[str, str]] = field(default_factory=dict)


def _insert_lines(path: Path, at: dict[int, bytes], tail: bytes = b"") -> None:
    """Insert raw lines so that they end up at the given 1-based line numbers."""
    lines = path.read_bytes().splitlines(keepends=True)
    for number in sorted(at):
        lines.insert(number - 1, at[number] + b"\n")
    path.write_bytes(b"".join(lines) + tail)


def build_corpus(runs: Path, outside: Path) -> Corpus:
    runs.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(runs)
    generate_run(runs / "good", SPEC, 0)

    generate_run(runs / "bad_lines", SPEC, 1)
    _insert_lines(
        runs / "bad_lines" / "episodes.jsonl",
        {
            2: b"",
            5: b'{"id": "broken", "skill_lib_version": 1',
            7: b"[1, 2, 3]",
            9: b'{"id": "v-str", "skill_lib_version": "3"}',
            10: b'{"id": "caf\xe9", "skill_lib_version": 0}',
            12: b"   ",
        },
        tail=b'{"id": "half", "skill_lib_ver',
    )
    total = len((runs / "bad_lines" / "episodes.jsonl").read_bytes().splitlines())
    corpus.bad_lines["bad_lines"] = {
        5: "not valid JSON",
        7: "not a JSON object",
        9: "skill_lib_version must be an integer",
        10: "not valid JSON",
        total: "not valid JSON",
    }

    generate_run(runs / "bad_snapshots", SPEC, 2)
    snaps = runs / "bad_snapshots" / "snapshots"
    shutil.copy(snaps / "skills_v3.json", snaps / "skills_v3.bak.json")
    (snaps / "skills_vfinal.json").write_text("{}", encoding="utf-8")
    (snaps / "skills_v1.json").write_bytes(b'{"version": 1, "cards": [')
    (snaps / "skills_v2.json").write_text(json.dumps([1, 2]), encoding="utf-8")
    corpus.bad_snapshots["bad_snapshots"] = {
        "skills_v1.json": "not a JSON object",
        "skills_v2.json": "not a JSON object",
    }

    generate_run(runs / "no_episodes", SPEC, 3)
    (runs / "no_episodes" / "episodes.jsonl").unlink()
    generate_run(runs / "no_snapshots", SPEC, 4)
    shutil.rmtree(runs / "no_snapshots" / "snapshots")
    generate_run(runs / "empty_episodes", SPEC, 5)
    (runs / "empty_episodes" / "episodes.jsonl").write_bytes(b"")

    generate_run(outside / "linked_target", SPEC, 6)
    (runs / "linked").symlink_to(outside / "linked_target", target_is_directory=True)

    generate_run(runs / "unreadable", SPEC, 7)
    (runs / "unreadable" / "episodes.jsonl").unlink()
    (runs / "unreadable" / "episodes.jsonl").mkdir()
    corpus.bad_lines["unreadable"] = {}

    generate_run(runs / "bad name", SPEC, 8)
    return corpus


def cleaned_copy(corpus: Corpus, dest: Path) -> Path:
    """The corpus as the original script can read it: rejects and stray files removed."""
    dest.mkdir(parents=True)
    for run in sorted(corpus.runs.iterdir()):
        if run.name in ("bad name", "unreadable", "no_episodes"):
            continue  # not partitions / unreadable / the original skips runs without episodes
        target = dest / run.name
        shutil.copytree(run, target, symlinks=False)
        bad = set(corpus.bad_lines.get(run.name, {}))
        episodes = target / "episodes.jsonl"
        if episodes.exists():
            lines = episodes.read_bytes().splitlines()
            kept = [ln for i, ln in enumerate(lines, 1) if i not in bad and ln.strip()]
            episodes.write_bytes(b"".join(ln + b"\n" for ln in kept))
        snaps = target / "snapshots"
        if snaps.is_dir():
            for path in snaps.iterdir():
                stray = path.name in ("skills_v3.bak.json", "skills_vfinal.json")
                if stray or path.name in corpus.bad_snapshots.get(run.name, {}):
                    path.unlink()
    return dest
