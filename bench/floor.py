"""The floor: the least CPU a byte-identical collect costs on a corpus, for the bench to
measure the project against.

    python bench/floor.py RUNS_DIR OUT_DIR [--prompts] [--check POOL_DIR]

Per run, each file read once in one call: ``episodes.jsonl`` parsed a line at a time by
msgspec (the stdlib where msgspec refuses a line: ``NaN``, a lone surrogate), each episode
dumped once by the stdlib (the original's bytes); each snapshot's ``_trigger_emb`` arrays cut
out by bytes, the rest parsed by msgspec, each distinct card dumped once per run (keyed by
its msgspec encoding); every state's JSON text assembled from the dumped pieces and written
to ``OUT_DIR/<state>.json``, the original's file name and bytes. ``--prompts`` renders each
state's curator prompt too (the bundled renderer under the default spec, as the fair peer
does), kept in memory, not written. ``--check`` compares every file written with a folder
the original wrote and fails on any difference.

It skips what the project must do and a floor need not: names and paths validated,
hostile files kept aside, the store's tables, digests, the run's own curator ops. A library
it cannot cut, one array a card (an array of another shape, the key elsewhere), goes the
original's way, parsed by the stdlib; the bench corpora's files are all cut, and
``cpu_compare.py`` checks the floor's files against the original's before it reports it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import msgspec

KEY = b'"_trigger_emb"'
SPACE, COMMA, BRACE = b" \n\r\t", ord(","), ord("{")
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.encode


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _load(data: bytes) -> object:
    try:
        return _decode(data)
    except msgspec.DecodeError:  # NaN, Infinity, a lone surrogate: what only the stdlib reads
        return json.loads(data)


def cut_embeddings(data: bytes) -> tuple[bytes, int] | None:
    """``data`` without its ``"_trigger_emb": [...]`` members (flat arrays of numbers) and how
    many were cut, or ``None`` where one is not of that shape or comes before the cards."""
    pieces, at, cuts = [], 0, 0
    cards = data.find(b'"cards"')
    while (key := data.find(KEY, at)) >= 0:
        start = data.find(b"[", key)
        end = data.find(b"]", start)
        if cards < 0 or key < cards or start < 0 or end < 0:
            return None
        if data[key + len(KEY) : start].strip(SPACE) != b":":
            return None
        if any(data.find(c, start + 1, end) >= 0 for c in (b"[", b'"', b"{")):
            return None
        i = key - 1
        while data[i] in SPACE:
            i -= 1
        if data[i] == COMMA:  # ', "_trigger_emb": [...]': cut from the comma
            pieces.append(data[at:i])
            at = end + 1
        elif data[i] == BRACE:  # '{"_trigger_emb": [...], ': cut through the next comma
            pieces.append(data[at:key])
            at = end + 1
            while data[at] in SPACE:
                at += 1
            if data[at] == COMMA:
                at += 1
                while data[at] in SPACE:
                    at += 1
        else:
            return None
        cuts += 1
    pieces.append(data[at:])
    return b"".join(pieces), cuts


def _library(data: bytes) -> tuple[dict, bool]:
    """The library without its cards' embeddings, and whether msgspec read it: by cutting the
    arrays out, where every cut is one card's; else the original's way."""
    cut = cut_embeddings(data) if KEY in data else (data, 0)
    if cut is not None:
        try:
            lib = _decode(cut[0])
        except msgspec.DecodeError:
            lib = None
        cards = lib.get("cards") if isinstance(lib, dict) else None
        cut_per_card = isinstance(cards, list) and cut[1] == sum(isinstance(c, dict) for c in cards)
        if cut_per_card and KEY not in lib:
            return lib, True
    lib = json.loads(data)
    for card in lib.get("cards", []):
        card.pop("_trigger_emb", None)
    return lib, False


def collect_run(run: Path, out: Path, prompts: list[str] | None, spec: object) -> int:
    """Every state of ``run`` written to ``out``; its prompts appended to ``prompts``."""
    by_version: dict[object, list[object]] = {}
    dumped: dict[object, list[str]] = {}
    for line in (run / "episodes.jsonl").read_bytes().splitlines():
        episode = _load(line)
        version = episode.get("skill_lib_version", 0)
        by_version.setdefault(version, []).append(episode)
        dumped.setdefault(version, []).append(_dumps(episode))
    cards: dict[bytes, str] = {}
    written = 0
    # The original's files, in its order (a later file of one version writes its state again).
    for path in sorted(glob.glob(os.path.join(run, "snapshots", "skills_v*.json"))):
        version = int(path.rsplit("skills_v", 1)[1].split(".")[0])
        batch_key = version - 1 if by_version.get(version - 1) else version
        batch = by_version.get(batch_key)
        if not batch:
            continue
        lib, fast = _library(Path(path).read_bytes())
        members = []
        for key, value in lib.items():
            if key == "cards" and isinstance(value, list):
                texts = []
                for card in value:
                    if not fast:  # NaN and null encode alike: only msgspec's cards are shared
                        texts.append(_dumps(card))
                        continue
                    token = _encode(card)
                    text = cards.get(token)
                    if text is None:
                        text = cards[token] = _dumps(card)
                    texts.append(text)
                members.append(f'"cards": [{", ".join(texts)}]')
            else:
                members.append(f"{_dumps(key)}: {_dumps(value)}")
        state_id = f"{run.name}_ckpt{version}"
        text = (
            f'{{"state_id": {_dumps(state_id)}, "dataset": "ovo", '
            f'"lib_snapshot": {{{", ".join(members)}}}, '
            f'"episodes": [{", ".join(dumped[batch_key])}], "analysis": null, '
            '"last_receipt": "(collected offline)", "followup_qids": [], "gt_map": {}}'
        )
        (out / f"{state_id}.json").write_bytes(text.encode("utf-8", "surrogatepass"))
        written += 1
        if prompts is not None:
            from statepool_dagster.core.prompts.render import build_curator_prompt

            state = SimpleNamespace(
                state_id=state_id,
                dataset="ovo",
                lib_snapshot=lib,
                episodes=batch,
                analysis=None,
                last_receipt="(collected offline)",
                followup_qids=[],
                gt_map={},
            )
            prompts.append(build_curator_prompt(state, spec))
    return written


def check(out: Path, original: Path) -> list[str]:
    """The files of ``original`` that ``out`` lacks or holds other bytes for."""
    wrong = []
    for path in sorted(original.glob("*.json")):
        mine = out / path.name
        if not mine.is_file() or mine.read_bytes() != path.read_bytes():
            wrong.append(path.name)
    extra = {p.name for p in out.glob("*.json")} - {p.name for p in original.glob("*.json")}
    return wrong + sorted(extra)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prompts", action="store_true", help="render every prompt too")
    parser.add_argument("--check", type=Path, help="a state pool the original wrote")
    args = parser.parse_args()
    spec, prompts = None, None
    if args.prompts:
        from statepool_dagster.core.prompts.spec import default_prompt_spec

        spec, prompts = default_prompt_spec(), []
    args.out.mkdir(parents=True, exist_ok=True)
    states = sum(
        collect_run(Path(run), args.out, prompts, spec)
        for run in sorted(glob.glob(os.path.join(args.runs, "*")))
        if os.path.isfile(os.path.join(run, "episodes.jsonl"))
    )
    if args.check is not None:
        wrong = check(args.out, args.check)
        if wrong:
            print(f"{len(wrong)} states differ from {args.check}: {', '.join(wrong[:5])}")
            return 1
    print(states)
    return 0


if __name__ == "__main__":
    sys.exit(main())
