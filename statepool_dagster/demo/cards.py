"""Sample skill cards (trigger, program, counters, embedding) and the questions runs ask."""

from __future__ import annotations

import json
import math
import random

from .pools import (
    _ACTIONS,
    _BRACE_SUFFIXES,
    _COLORS,
    _NONASCII_SUFFIXES,
    _OBJECTS,
    _PLACES,
    _PROCEDURES,
    _RELATIONS,
    _REPEATS,
    _SIGNS,
    _TEXTS,
    TASKS,
)


class _Card:
    """Mutable card state with cached JSON fragments (head and embedding)."""

    __slots__ = (
        "emb",
        "emb_bytes",
        "fired",
        "harmful",
        "head",
        "helped",
        "injected",
        "num",
        "program",
        "task",
        "trigger",
    )

    def __init__(self, num: int, task: str, trigger: str, program: str, emb: list[float]):
        self.num = num
        self.task = task
        self.injected = self.fired = self.helped = self.harmful = 0
        self.set_text(trigger, program)
        self.set_emb(emb)

    @property
    def card_id(self) -> str:
        """Public id, e.g. ``c0007``."""
        return f"c{self.num:04d}"

    def set_text(self, trigger: str, program: str) -> None:
        """Set trigger/program and re-render the cached JSON head."""
        self.trigger = trigger
        self.program = program
        self.head = (
            f'{{"card_id": "{self.card_id}", '
            f'"trigger": {json.dumps(trigger, ensure_ascii=False)}, '
            f'"program": {json.dumps(program, ensure_ascii=False)}, '
        ).encode()

    def set_emb(self, emb: list[float]) -> None:
        """Set the embedding and render its JSON text once."""
        self.emb = emb
        self.emb_bytes = json.dumps(emb).encode("ascii")

    def to_json_bytes(self) -> bytes:
        """Card as JSON, identical to ``json.dumps(card_dict, ensure_ascii=False)``."""
        meta = (
            f'"meta_info": {{"injected": {self.injected}, "fired": {self.fired}, '
            f'"helped": {self.helped}, "harmful": {self.harmful}}}, "_trigger_emb": '
        )
        return b"".join((self.head, meta.encode("ascii"), self.emb_bytes, b"}"))


def _snapshot_bytes(version: int, cards: list[_Card]) -> bytes:
    """Snapshot file content, identical to ``json.dumps(lib, ensure_ascii=False)``."""
    body = b", ".join([c.to_json_bytes() for c in cards])
    return b'{"version": %d, "cards": [' % version + body + b"]}"


def _card_task(num: int, run_index: int) -> str:
    """Task a card specializes in; a pure function of its id (survives reloading)."""
    return TASKS[(num * 5 + run_index) % len(TASKS)]


def _normalize(vec: list[float]) -> list[float]:
    """Unit-normalize and round to 8 decimals (all values end up in [-1, 1]).

    About float32's precision, as an embedding model's output written as JSON: at 768-d
    the reference corpus comes to about 1 GB, the size the benchmark targets name.
    """
    norm = math.hypot(*vec)
    if norm == 0.0:
        return [0.0] * len(vec)
    inv = 1.0 / norm
    return [round(v * inv, 8) for v in vec]


# The tasks whose question is one of a few fixed texts: the texts, and where options come from.
_FIXED_QUESTIONS = {
    "HLD": (
        (
            "Which of these objects has NOT appeared in the video so far?",
            "Which of the following did the person never touch before now?",
        ),
        _OBJECTS,
    ),
    "OJR": (
        (
            "What object is the person holding right now?",
            "Which object was just placed on the table?",
        ),
        _OBJECTS,
    ),
    "ACR": (("What is the person doing right now?", "What action is being performed?"), _ACTIONS),
    "FPD": (
        (
            "What will the person most likely do next?",
            "Which action is most likely to follow the current one?",
        ),
        _ACTIONS,
    ),
    "CRR": (
        (
            "What is inside the box the person is about to open?",
            "Which object will the presenter reveal at the end of the demo?",
        ),
        _OBJECTS,
    ),
}


def _make_question(rng: random.Random, task: str) -> tuple[str, list[str]]:
    """A plausible OVO-Bench-style question and 4 option texts for ``task``."""
    if task == "EPM":
        obj, act = rng.choice(_OBJECTS), rng.choice(_ACTIONS)
        q = f"Where did I put the {obj} before I started {act}?"
        opts = rng.sample(_PLACES, 4)
    elif task == "ASI":
        act = rng.choice(_ACTIONS)
        q = f"Which action did the person perform right after {act}?"
        opts = rng.sample([a for a in _ACTIONS if a != act], 4)
    elif task == "STU":
        a, b = rng.sample(_OBJECTS, 2)
        q = f"Where is the {a} relative to the {b} right now?"
        opts = [f"{r} the {b}" for r in rng.sample(_RELATIONS, 4)]
    elif task == "ATR":
        obj = rng.choice(_OBJECTS)
        q = f"What color is the {obj} {rng.choice(_PLACES)} at this moment?"
        opts = rng.sample(_COLORS, 4)
    elif task == "OCR":
        q = f"What text is written on the {rng.choice(_SIGNS)} right now?"
        opts = rng.sample(_TEXTS, 4)
    elif task == "REC":
        past, _ = rng.choice(_REPEATS)
        q = f"How many times has the person {past} so far?"
        start = rng.randint(1, 5)
        opts = [str(start + i) for i in range(4)]
    elif task == "SSR":
        proc, steps = rng.choice(_PROCEDURES)
        q = f"While {proc}, which step has the person just completed?"
        opts = rng.sample(steps, 4)
    else:  # HLD, OJR, ACR, FPD, CRR: one of a few fixed questions
        texts, pool = _FIXED_QUESTIONS[task]
        q, opts = rng.choice(texts), rng.sample(pool, 4)
    r = rng.random()
    if r < 1 / 15:
        q += rng.choice(_NONASCII_SUFFIXES)
    elif r < 1 / 15 + 1 / 25:
        q += rng.choice(_BRACE_SUFFIXES)
    return q, opts
