"""Regenerate the golden fixtures from the original script.

    python tests/golden/make_golden.py [--seed PATH] [--new-runs]

Inputs: the small runs in ``runs/`` (written anew with ``--new-runs`` or when missing).
Outputs, written by the ORIGINAL script (``../shared/reference/statepool_seed.py`` beside
the repo, or ``--seed``), byte for byte:

- ``expected/state_pool/<run>/<state_id>.json``: what ``collect_from_run`` writes;
- ``expected/prompts/<template>/<state_id>.txt``: ``build_curator_prompt`` of each state,
  under the bundled template (``bundled``) and under ``standin/``, a stand-in inference
  side whose template has literal braces, format specs and non-ASCII text (``standin``).

The original imports ``infer.*`` for its template: a package holding the bundled defaults
is written to a temp folder for ``bundled``; ``standin/`` is that package for ``standin``.
tests/test_golden.py compares the pipeline with these files on every clone, and
regenerates them into a temp folder to compare with the live original when it is present.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import locale
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

GOLDEN = Path(__file__).resolve().parent
REPO = GOLDEN.parents[1]
RUNS = GOLDEN / "runs"
EXPECTED = GOLDEN / "expected"
STANDIN = GOLDEN / "standin"
DEFAULTS = REPO / "statepool_dagster" / "core" / "prompts" / "defaults"
SEED_PATH = REPO.parent / "shared" / "reference" / "statepool_seed.py"
TEMPLATES = ("bundled", "standin")
# What the pipeline's settings name to render with the stand-in (the original's imports).
INFER_SETTINGS = {
    "prompt_template": "infer.curator.curator:CURATOR_PROMPT",
    "param_rule": "infer.curator.curator:PARAM_RULE_ON",
    "tool_specs": "infer.tools:TOOL_SPECS",
    "episode_formatter": "infer.curator.reflector:format_episodes",
}


def _card(card_id: str, trigger: str, program: str, emb: list[float], **meta: int) -> dict:
    return {
        "card_id": card_id,
        "trigger": trigger,
        "_trigger_emb": emb,
        "program": program,
        "meta_info": {"injected": 0, "fired": 0, "helped": 0, "harmful": 0, **meta},
    }


def _unicode_run(run: Path) -> None:
    """A hand-written run: non-ASCII and braces everywhere, a line without a version, long
    texts past the catalog's cuts, and snapshot v10 (after v2 in numbers, before it in text)."""
    episodes = [
        {
            "id": "ü-1",
            "skill_lib_version": 0,
            "question": "Où est le «mug»? {x} 日本語",
            "gt": "A",
            "response": "A",
            "correct": True,
            "realtime": 12.5,
        },
        {
            "id": "ü-2",
            "question": "Sans version — {0} {{}}",
            "gt": "B",
            "response": "C",
            "correct": False,
        },
        {
            "skill_lib_version": 1,
            "id": "ü-3",
            "question": "Qué pasó después? ½ ⅓ 🙂",
            "gt": "D",
            "response": "D",
            "correct": True,
            "options": ["A", "B", "D"],
        },
        {
            "id": "ü-4",
            "skill_lib_version": 2,
            "question": "Καλημέρα {name!r:>5}",
            "gt": "E",
            "response": None,
            "correct": None,
        },
        {
            "id": "ü-5",
            "skill_lib_version": 10,
            "question": "Zehn?",
            "gt": "F",
            "response": "F",
            "correct": True,
        },
    ]
    long_trigger = "Wenn ein Objekt verdeckt ist — " * 8
    long_program = "1. Zurückspulen {t-5s}; 2. Nochmals prüfen; " * 8
    libraries = {
        0: [],
        1: [
            _card(
                "c0001",
                "Quand «l'objet» bouge {vite}",
                "1. Suivre; 2. Noter",
                [0.12345678, -1.5e-7, 3.0],
                injected=2,
                fired=1,
            )
        ],
        2: [
            _card(
                "c0001",
                "Quand «l'objet» bouge {vite}",
                "1. Suivre; 2. Noter; 3. Vérifier",
                [0.12345678, -1.5e-7, 3.0],
                injected=4,
                fired=2,
                helped=1,
            ),
            _card("c0002", long_trigger, long_program, [1e-3, 2e-3, -0.0], harmful=1),
        ],
        10: [_card("c0002", long_trigger, long_program, [1e-3, 2e-3, -0.0], harmful=2)],
    }
    (run / "snapshots").mkdir(parents=True)
    lines = [json.dumps(e, ensure_ascii=False) + "\n" for e in episodes]
    (run / "episodes.jsonl").write_text("".join(lines), encoding="utf-8")
    for version, cards in libraries.items():
        library = {"version": version, "cards": cards, "note": f"Bibliothek {version} ✓"}
        text = json.dumps(library, ensure_ascii=False, indent=1)
        (run / "snapshots" / f"skills_v{version}.json").write_text(text, encoding="utf-8")


def write_runs(root: Path) -> None:
    """The golden runs: two small generated runs and the hand-written one."""
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

    spec = SampleSpec(
        n_runs=2,
        n_checkpoints=4,
        n_cards=4,
        emb_dim=3,
        episodes_per_batch=3,
        seed=7,
        run_prefix="golden",
    )
    generate_runs(root, spec)
    _unicode_run(root / "unicode_run")


def load_original(path: Path) -> ModuleType:
    name = "statepool_seed_for_golden"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _drop_infer() -> None:
    for name in [m for m in sys.modules if m == "infer" or m.startswith("infer.")]:
        del sys.modules[name]


def write_bundled_infer(root: Path) -> Path:
    """An ``infer`` package holding the bundled template, rule, tool specs and formatter."""
    curator = root / "infer" / "curator"
    curator.mkdir(parents=True)
    (root / "infer" / "__init__.py").write_text("", encoding="utf-8")
    (curator / "__init__.py").write_text("", encoding="utf-8")
    template = (DEFAULTS / "curator_prompt.txt").read_text(encoding="utf-8")
    rule = (DEFAULTS / "param_rule.txt").read_text(encoding="utf-8")
    tools = json.loads((DEFAULTS / "tool_specs.json").read_text(encoding="utf-8"))
    (curator / "curator.py").write_text(
        f"CURATOR_PROMPT = {template!r}\nPARAM_RULE_ON = {rule!r}\n", encoding="utf-8"
    )
    (curator / "reflector.py").write_text(
        "from statepool_dagster.core.prompts.template import format_episodes  # noqa: F401\n",
        encoding="utf-8",
    )
    (root / "infer" / "tools.py").write_text(f"TOOL_SPECS = {tools!r}\n", encoding="utf-8")
    return root


@contextmanager
def infer_side(template: str) -> Iterator[Path]:
    """``infer`` importable from the folder of ``template`` (bundled or standin)."""
    with tempfile.TemporaryDirectory() as temp:
        root = STANDIN if template == "standin" else write_bundled_infer(Path(temp))
        _drop_infer()
        sys.path.insert(0, str(root))
        try:
            yield root
        finally:
            sys.path.remove(str(root))
            _drop_infer()


def original_outputs(seed: ModuleType, runs: Path, out: Path) -> None:
    """What the original writes and renders for ``runs``, into ``out``."""
    if locale.getpreferredencoding(False).lower().replace("-", "") != "utf8":
        raise SystemExit("the original script reads and writes with the locale: use a UTF-8 one")
    pools = out / "state_pool"
    for run in sorted(p for p in runs.iterdir() if (p / "episodes.jsonl").is_file()):
        seed.collect_from_run(str(run), str(pools / run.name))
    for template in TEMPLATES:
        with infer_side(template):
            folder = out / "prompts" / template
            folder.mkdir(parents=True)
            for state_file in sorted(pools.glob("*/*.json")):
                state = seed.CheckpointState.from_json(state_file.read_text(encoding="utf-8"))
                prompt = seed.build_curator_prompt(state, None)
                (folder / f"{state.state_id}.txt").write_bytes(prompt.encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=Path, default=SEED_PATH, help="the original script")
    parser.add_argument("--new-runs", action="store_true", help="write runs/ anew")
    args = parser.parse_args(argv)
    if not args.seed.is_file():
        print(f"original script not found at {args.seed} (--seed PATH)", file=sys.stderr)
        return 2
    if args.new_runs or not RUNS.is_dir():
        shutil.rmtree(RUNS, ignore_errors=True)
        write_runs(RUNS)
    shutil.rmtree(EXPECTED, ignore_errors=True)
    original_outputs(load_original(args.seed), RUNS, EXPECTED)
    files = [p for p in GOLDEN.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    print(f"{len(files)} files, {sum(p.stat().st_size for p in files) // 1024} KB in {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
