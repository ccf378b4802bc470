"""Seeded random splices of JSON tokens, and runs grown between two syncs."""

from __future__ import annotations

import os
from pathlib import Path

from .registry import BIG, SECOND, Mutation, _eps, _snap, mutation

TOKENS = [
    b'"',
    b"\\",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b":",
    b"\xff",
    b"\xc3",
    b"\x00",
    b"\r",
    b"\n",
    b"\r\n",
    b" ",
    b"\t",
    b"\x0c",
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"-0",
    b"9" * 4301,
    b'"_trigger_emb": ',
    b'"_trigger_emb": [1], ',
    b'"cards": ',
    b'"cards": [], ',
    b'"skill_lib_version": ',
    b'"skill_lib_version": 2, ',
    b'"version": 1, ',
    b"\\u0000",
    b"\\ud800",
    b"\\ud83d\\ude00",
    b"\\u005f",
    b"\xef\xbb\xbf",
    b"\xe2\x80\xa8",
    b"null",
    b"true",
    b"[[[[",
    b"]]]]",
    b'"a": 1, "a": 2, ',
]


def _random_splices(seed: int, target: str) -> Mutation:
    def apply(run: Path) -> None:
        import random

        rng = random.Random(seed)
        path = _eps(run) if target == "eps" else _snap(run, rng.choice([0, 1, 2]))
        data = bytearray(path.read_bytes())
        for _ in range(rng.choice([1, 1, 2, 3])):
            at = rng.randrange(len(data) + 1)
            op = rng.random()
            if op < 0.6:
                data[at:at] = rng.choice(TOKENS)
            elif op < 0.8:
                data[at : at + rng.randint(1, 8)] = b""
            else:
                # a member-sized span repeated (a duplicate key, usually)
                start = data.rfind(b", ", 0, at)
                end = data.find(b", ", at)
                if 0 <= start < end:
                    data[end:end] = data[start:end]
        path.write_bytes(bytes(data))

    return apply


# ROUND3_SEED shifts the seeds, ROUND3_RANDOM sets how many runs of each kind (60)
_SEED = int(os.environ.get("ROUND3_SEED", "0")) * 10_000
_COUNT = int(os.environ.get("ROUND3_RANDOM", "60"))
for _i in range(_COUNT):
    mutation(f"rnd_eps_{_i}")(_random_splices(_SEED + _i, "eps"))
    mutation(f"rnd_snap_{_i}")(_random_splices(_SEED + 1000 + _i, "snap"))
for _i in range(_COUNT // 4):
    mutation(f"rnd_big_snap_{_i}", BIG)(_random_splices(_SEED + 2000 + _i, "snap"))


def _random_growth(seed: int, phase: int) -> Mutation:
    """A writer caught mid-write: the file cut anywhere, then grown by random tails."""

    def apply(run: Path) -> None:
        import random

        rng = random.Random(seed * 2 + phase)
        data = _eps(run).read_bytes()
        if phase == 0:
            lines = data.splitlines(keepends=True)
            cut = rng.randrange(len(data) + 1)
            held = data[cut:]
            (run / ".held").write_bytes(held)  # hidden: not a run file, not fingerprinted
            data = data[:cut]
            if rng.random() < 0.3:
                data += rng.choice(TOKENS)
            del lines
        else:
            held = (run / ".held").read_bytes()
            pieces = [held]
            for _ in range(rng.randint(0, 3)):
                pieces.append(rng.choice([b"\n", b"\r", b"\r\n", b"", rng.choice(TOKENS)]))
                pieces.append(b'{"id": "grown", "skill_lib_version": %d}' % rng.randint(0, 3))
            data += b"".join(pieces)
            if rng.random() < 0.7:
                data += b"\n"
        _eps(run).write_bytes(data)

    return apply


for _i in range(_COUNT // 2):
    mutation(f"rnd_grow_{_i}")(_random_growth(_SEED + 3000 + _i, 0))
    SECOND[f"rnd_grow_{_i}"] = _random_growth(_SEED + 3000 + _i, 1)

# --- sidecars (states differ by design: only failures are checked) ------------------------
