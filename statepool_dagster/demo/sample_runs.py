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

import json
import math
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SNAPSHOT_RE",
    "TASKS",
    "SampleSpec",
    "append_checkpoint",
    "generate_run",
    "generate_runs",
]

TASKS: tuple[str, ...] = (
    "EPM",
    "ASI",
    "HLD",
    "STU",
    "OJR",
    "ATR",
    "ACR",
    "OCR",
    "FPD",
    "REC",
    "SSR",
    "CRR",
)
SNAPSHOT_RE = re.compile(r"skills_v(\d+)\.json")
LETTERS = ("A", "B", "C", "D")


@dataclass(frozen=True)
class SampleSpec:
    """Size and seed of the generated sample runs."""

    n_runs: int = 3
    n_checkpoints: int = 6
    n_cards: int = 12
    emb_dim: int = 16
    episodes_per_batch: int = 8
    seed: int = 0
    run_prefix: str = "run"


# --------------------------------------------------------------------------- text pools

_OBJECTS = (
    "mug",
    "screwdriver",
    "cutting board",
    "laptop",
    "backpack",
    "frying pan",
    "water bottle",
    "pair of scissors",
    "notebook",
    "tomato",
    "remote control",
    "paint brush",
    "wrench",
    "glass jar",
    "phone",
    "spatula",
    "measuring tape",
    "towel",
)
_PLACES = (
    "on the kitchen counter",
    "inside the top drawer",
    "on the wall shelf",
    "in the sink",
    "on the desk",
    "next to the stove",
    "on the floor",
    "in the fridge",
    "in the cardboard box",
    "on the windowsill",
)
_ACTIONS = (
    "chopping onions",
    "washing hands",
    "stirring the pot",
    "opening the fridge",
    "tightening a bolt",
    "folding laundry",
    "pouring water",
    "typing on a keyboard",
    "sanding a plank",
    "cracking an egg",
    "wiping the table",
    "peeling a potato",
)
_REPEATS = (
    ("stirred the pot", "stirring"),
    ("opened the cabinet", "opening the cabinet"),
    ("hammered the nail", "hammering"),
    ("dribbled the ball", "dribbling"),
    ("flipped the pancake", "flipping"),
    ("jumped over the rope", "jumping rope"),
)
_COLORS = ("red", "blue", "green", "black", "white", "yellow", "silver", "orange", "purple")
_RELATIONS = ("to the left of", "to the right of", "behind", "on top of", "in front of", "under")
_SIGNS = ("whiteboard", "shop sign", "laptop screen", "cereal box", "street sign", "jar label")
_TEXTS = (
    '"EXIT"',
    '"OPEN 24 HOURS"',
    '"Aisle 7"',
    '"SALE 50% OFF"',
    '"Platform 3"',
    '"def f(x): return {x}"',
    "\"print('{}'.format(n))\"",
    '"Room 214"',
    '"NO PARKING"',
    '"Caution: Wet Floor"',
    '"f(x) = {x + 1}"',
    '"Batch {}: done"',
)
_PROCEDURES = (
    (
        "changing a bike tire",
        (
            "remove the wheel",
            "take out the inner tube",
            "patch the hole",
            "inflate the tire",
            "reattach the wheel",
        ),
    ),
    (
        "making pancakes",
        (
            "whisk the batter",
            "heat the pan",
            "pour the batter",
            "flip the pancake",
            "plate the pancake",
        ),
    ),
    (
        "assembling a shelf",
        (
            "lay out the panels",
            "insert the dowels",
            "attach the side panels",
            "screw in the back board",
            "mount the shelves",
        ),
    ),
    (
        "replacing a faucet",
        (
            "shut off the water",
            "disconnect the supply lines",
            "remove the old faucet",
            "seat the new faucet",
            "reconnect the lines",
        ),
    ),
)
_NONASCII_SUFFIXES = (
    " Note: the sign in the background says “Café Olé”.",
    " The subtitles are in Japanese (日本語の字幕).",
    " Ignore the naïve first impression — wait for clear evidence.",
    " Answer as soon as the evidence appears — not before.",
    " Context: a crème brûlée is being prepared.",
    " The street sign reads “Hauptstraße”.",
    " The narrator asks: ¿dónde está la llave?",
)
_BRACE_SUFFIXES = (
    " Respond in the format {letter}.",
    " (The overlay template shows '{}'.)",
    " Use the frame index {frame_idx} if it helps.",
)

_TRIGGER_PHRASES = {
    "EPM": (
        "where an object was last seen earlier in the stream",
        "what the camera wearer did with an item before the current moment",
    ),
    "ASI": (
        "for the order in which actions were performed so far",
        "which action came immediately before or after a reference action",
    ),
    "HLD": (
        "about an object or event that may never have appeared in the video",
        "which option is not supported by anything seen so far",
    ),
    "STU": (
        "where an object is located relative to another object right now",
        "about left/right or front/behind relations in the current frame",
    ),
    "OJR": (
        "which object the person is currently holding or showing",
        "to identify an object visible at the query time",
    ),
    "ATR": (
        "about the color, size or material of a visible object",
        "to compare attributes of objects in the current frame",
    ),
    "ACR": ("what action is happening at the query time", "what the person is doing right now"),
    "OCR": (
        "to read text shown on a screen, a sign or a label",
        "what is written on an object in view",
    ),
    "FPD": (
        "what will most likely happen next in the stream",
        "to predict the person's next action",
    ),
    "REC": (
        "how many times an action has been repeated so far",
        "to count repetitions of a periodic action up to now",
    ),
    "SSR": (
        "which procedural step has just been completed",
        "whether a specific step of a procedure is finished yet",
    ),
    "CRR": (
        "about something whose answer is revealed only later in the stream",
        "a question that requires waiting for a clue before responding",
    ),
}
_TRIGGER_CLAUSES = (
    ", especially when the relevant frames are far from the query time",
    " and the options differ only in fine-grained visual details",
    ", and the video is egocentric with rapid camera motion",
    " while several similar objects are visible at once",
    ", even if the question wording is indirect or uses pronouns",
    " and earlier answers in the same stream may be stale",
)
_NONASCII_CLAUSES = (
    " — check the subtitles (日本語の字幕) first",
    ", e.g. a café menu board",
    " without making a naïve guess",
)
_BRACE_CLAUSES = (
    " referencing a timestamp like {frame_idx}",
    " where the prompt contains a template such as {}",
    " using the slot {object} from the question",
)
_TASK_STEPS = {
    "EPM": "Scan backward from the query time and find the last frame showing the object.",
    "ASI": "Segment the history into atomic actions and order them by start time.",
    "HLD": "Check each option against the recorded object list; unseen items are suspects.",
    "STU": "Localize both objects in the latest frame and compare their bounding boxes.",
    "OJR": "Crop the hands region in the latest frame and name the held object.",
    "ATR": "Zoom on the target object and read off its dominant color and material.",
    "ACR": "Sample the last 3 seconds densely and describe the motion of the hands.",
    "OCR": "Find text regions in the latest frame and transcribe them character by character.",
    "FPD": "Identify the current step of the activity and the usual step that follows it.",
    "REC": "Mark every completed cycle of the action and count the marks.",
    "SSR": "Match the observed steps to the canonical procedure and find the last done one.",
    "CRR": "If the clue has not appeared yet, keep watching instead of answering.",
}
_GENERIC_STEPS = (
    "Locate the query timestamp and sample frames from the preceding 30 seconds.",
    "List every candidate mentioned in the options before looking at the frames.",
    "Compare each option against the visual evidence and eliminate contradictions.",
    "Prefer evidence from frames closest to the query time over older frames.",
    "Re-read the question for negations such as 'not' or 'never'.",
    "If two options remain, look for a distinguishing detail in a higher-resolution crop.",
)
_FINAL_STEPS = (
    "Answer with the single best option letter.",
    "Pick the option with the strongest direct visual support.",
    "If nothing supports any option, choose the one stating the event did not occur.",
)
_VIDEO_SOURCES = (
    "ego4d",
    "epic_kitchens",
    "coin",
    "youcook2",
    "cross_task",
    "perception_test",
    "star",
    "thumos",
    "moviechat",
    "hirest",
)


# --------------------------------------------------------------------------- cards


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


# --------------------------------------------------------------------------- run context


class _RunContext:
    """Per-run constants: name, task topic vectors and a video pool."""

    def __init__(self, spec: SampleSpec, run_index: int, run_name: str):
        self.spec = spec
        self.run_index = run_index
        self.run_name = run_name
        rng = random.Random(f"{spec.seed}:{run_index}:topics")
        self.topics = {t: [rng.gauss(0.0, 1.0) for _ in range(spec.emb_dim)] for t in TASKS}
        vrng = random.Random(f"{spec.seed}:{run_index}:videos")
        self.videos: list[tuple[str, float]] = []
        for _ in range(48):
            src = vrng.choice(_VIDEO_SOURCES)
            name = f"ovo/videos/{src}_{vrng.getrandbits(40):010x}.mp4"
            self.videos.append((name, round(vrng.uniform(60.0, 1800.0), 1)))

    def rng(self, version: int, purpose: str) -> random.Random:
        """RNG seeded from (seed, run_index, version, purpose)."""
        return random.Random(f"{self.spec.seed}:{self.run_index}:{version}:{purpose}")

    # ---- card content

    def make_text(self, rng: random.Random, task: str) -> tuple[str, str]:
        """Generate a (trigger, program) pair for a task."""
        n_clauses = rng.choices((0, 1, 2, 3), weights=(4, 3, 2, 1))[0]
        clauses = rng.sample(_TRIGGER_CLAUSES, n_clauses)
        if rng.random() < 0.1:
            clauses.append(rng.choice(_NONASCII_CLAUSES))
        if rng.random() < 0.12:
            clauses.append(rng.choice(_BRACE_CLAUSES))
        trigger = f"When the question asks {rng.choice(_TRIGGER_PHRASES[task])}"
        trigger += "".join(clauses) + "."
        n_generic = rng.choices((0, 1, 2, 3), weights=(2, 4, 3, 1))[0]
        steps = [_TASK_STEPS[task], *rng.sample(_GENERIC_STEPS, n_generic)]
        rng.shuffle(steps)
        steps.append(rng.choice(_FINAL_STEPS))
        program = " ".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
        return trigger, program

    def new_card(self, rng: random.Random, num: int) -> _Card:
        """Create a fresh card with id ``num``."""
        task = _card_task(num, self.run_index)
        trigger, program = self.make_text(rng, task)
        rnd = rng.random  # uniform noise (std 0.8): much cheaper than gauss at 768-d
        emb = _normalize([t + 2.77 * (rnd() - 0.5) for t in self.topics[task]])
        return _Card(num, task, trigger, program, emb)

    def rewrite(self, rng: random.Random, card: _Card) -> None:
        """Curator rewrite: new trigger/program (same id), perturbed new embedding."""
        trigger, program = self.make_text(rng, card.task)
        if trigger == card.trigger and program == card.program:
            trigger = trigger[:-1] + ", after re-checking the query time."
        card.set_text(trigger, program)
        # uniform perturbation of the unit vector, sized so cosine(old, new) is about 0.9
        width = 1.7 / math.sqrt(max(1, len(card.emb)))
        rnd = rng.random
        card.set_emb(_normalize([v + width * (rnd() - 0.5) for v in card.emb]))

    # ---- library evolution

    def initial_library(self) -> list[_Card]:
        """Library version 0: about half of ``n_cards`` fresh cards."""
        n = self.spec.n_cards
        size = max(1, n // 2) if n > 0 else 0
        rng = self.rng(0, "lib")
        return [self.new_card(rng, i) for i in range(size)]

    def next_library(
        self, cards: list[_Card], version: int, stats: dict[int, list[int]]
    ) -> list[_Card]:
        """Derive library ``version`` from ``version - 1`` and that batch's stats.

        Mutates and returns ``cards``. The card with the highest id is never removed, so
        the next free id is always ``max(id) + 1`` and ids are never reused.
        """
        rng = self.rng(version, "lib")
        for card in cards:
            d = stats.get(card.num)
            if d is not None:
                card.injected += d[0]
                card.fired += d[1]
                card.helped += d[2]
                card.harmful += d[3]
        target = self.spec.n_cards
        if target <= 0:
            return cards
        if cards and rng.random() < 0.15:
            self.rewrite(rng, rng.choice(cards))
        size = len(cards)
        p_remove = 0.85 if size > target + 1 else 0.3 if size >= target else 0.0
        if size > 1 and rng.random() < p_remove:
            candidates = sorted(cards[:-1], key=lambda c: (c.helped - c.harmful, c.fired, c.num))
            victim = rng.choice(candidates[:3])
            cards.remove(victim)
        deficit = target - len(cards)
        if deficit > 2:
            n_add = max(1, (deficit + 1) // 2 - rng.randint(0, 1))
        elif deficit >= -1 and rng.random() < (0.8 if deficit > 0 else 0.3):
            n_add = rng.randint(1, 2)
        else:
            n_add = 0
        next_num = cards[-1].num + 1 if cards else 0
        for i in range(n_add):
            cards.append(self.new_card(rng, next_num + i))
        return cards

    # ---- episodes

    def episodes(self, cards: list[_Card], version: int) -> tuple[list[str], dict[int, list[int]]]:
        """Episode JSONL lines for ``version`` and per-card meta deltas."""
        rng = self.rng(version, "ep")
        by_task: dict[str, list[_Card]] = {}
        for c in cards:
            by_task.setdefault(c.task, []).append(c)
        base = 0.45 + 0.25 * (1.0 - math.exp(-version / 8.0))
        others_by_task: dict[str, list[_Card]] = {}
        stats: dict[int, list[int]] = {}
        lines: list[str] = []
        for j in range(self.spec.episodes_per_batch):
            task = rng.choice(TASKS)
            video, duration = rng.choice(self.videos)
            realtime = round(rng.uniform(min(5.0, duration), duration), 1)
            question, opts = _make_question(rng, task)
            gt_idx = rng.randrange(4)
            # retrieval: same-task cards first, then a few unrelated ones
            same = by_task.get(task, [])
            injected = rng.sample(same, min(len(same), 3))
            n_other = min(4 - len(injected), len(cards) - len(same), rng.randint(0, 2))
            if n_other > 0:
                others = others_by_task.get(task)
                if others is None:
                    others = others_by_task[task] = [c for c in cards if c.task != task]
                injected += rng.sample(others, n_other)
            m = min(len(injected), rng.choices((0, 1, 2, 3), weights=(3, 4, 2, 1))[0])
            fired = injected[:m]
            p = base
            if any(c.task == task for c in fired):
                p += 0.05
            correct = rng.random() < p
            gt = LETTERS[gt_idx]
            response = gt if correct else rng.choice([x for x in LETTERS if x != gt])
            for c in injected:
                stats.setdefault(c.num, [0, 0, 0, 0])[0] += 1
            for c in fired:
                d = stats[c.num]
                d[1] += 1
                r = rng.random()
                if correct and r < 0.7:
                    d[2] += 1
                elif not correct and r < 0.5:
                    d[3] += 1
            ep = {
                "id": f"{self.run_name}-v{version}-{j:03d}",
                "task": task,
                "video": video,
                "realtime": realtime,
                "question": question,
                "options": [f"{LETTERS[i]}. {o}" for i, o in enumerate(opts)],
                "gt": gt,
                "response": response,
                "correct": correct,
                "fired_cards": [c.card_id for c in fired],
                "skill_lib_version": version,
            }
            lines.append(json.dumps(ep, ensure_ascii=False) + "\n")
        return lines, stats

    def load_library(self, path: Path) -> list[_Card]:
        """Rebuild card state from a snapshot file written by this module."""
        data = json.loads(path.read_text(encoding="utf-8"))
        cards = []
        for d in data["cards"]:
            num = int(d["card_id"][1:])
            card = _Card(
                num, _card_task(num, self.run_index), d["trigger"], d["program"], d["_trigger_emb"]
            )
            meta = d["meta_info"]
            card.injected = meta["injected"]
            card.fired = meta["fired"]
            card.helped = meta["helped"]
            card.harmful = meta["harmful"]
            cards.append(card)
        return cards


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
    elif task == "HLD":
        q = rng.choice(
            (
                "Which of these objects has NOT appeared in the video so far?",
                "Which of the following did the person never touch before now?",
            )
        )
        opts = rng.sample(_OBJECTS, 4)
    elif task == "STU":
        a, b = rng.sample(_OBJECTS, 2)
        q = f"Where is the {a} relative to the {b} right now?"
        opts = [f"{r} the {b}" for r in rng.sample(_RELATIONS, 4)]
    elif task == "OJR":
        q = rng.choice(
            (
                "What object is the person holding right now?",
                "Which object was just placed on the table?",
            )
        )
        opts = rng.sample(_OBJECTS, 4)
    elif task == "ATR":
        obj = rng.choice(_OBJECTS)
        q = f"What color is the {obj} {rng.choice(_PLACES)} at this moment?"
        opts = rng.sample(_COLORS, 4)
    elif task == "ACR":
        q = rng.choice(("What is the person doing right now?", "What action is being performed?"))
        opts = rng.sample(_ACTIONS, 4)
    elif task == "OCR":
        q = f"What text is written on the {rng.choice(_SIGNS)} right now?"
        opts = rng.sample(_TEXTS, 4)
    elif task == "FPD":
        q = rng.choice(
            (
                "What will the person most likely do next?",
                "Which action is most likely to follow the current one?",
            )
        )
        opts = rng.sample(_ACTIONS, 4)
    elif task == "REC":
        past, _ = rng.choice(_REPEATS)
        q = f"How many times has the person {past} so far?"
        start = rng.randint(1, 5)
        opts = [str(start + i) for i in range(4)]
    elif task == "SSR":
        proc, steps = rng.choice(_PROCEDURES)
        q = f"While {proc}, which step has the person just completed?"
        opts = rng.sample(steps, 4)
    else:  # CRR
        q = rng.choice(
            (
                "What is inside the box the person is about to open?",
                "Which object will the presenter reveal at the end of the demo?",
            )
        )
        opts = rng.sample(_OBJECTS, 4)
    r = rng.random()
    if r < 1 / 15:
        q += rng.choice(_NONASCII_SUFFIXES)
    elif r < 1 / 15 + 1 / 25:
        q += rng.choice(_BRACE_SUFFIXES)
    return q, opts


# --------------------------------------------------------------------------- public API


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
    ctx = _RunContext(spec, run_index, run_dir.name)
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


def generate_runs(root: str | os.PathLike, spec: SampleSpec = SampleSpec()) -> list[Path]:
    """Write spec.n_runs runs under root; return their directories (sorted)."""
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
    ctx = _RunContext(spec, run_index, run_dir.name)
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
