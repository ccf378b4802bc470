"""What each checkpoint of a sample run holds: the library the curator evolved and the batch
of episodes it served, a pure function of ``(spec, run_index, version)`` and the previous
library."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from .cards import _Card, _card_task, _make_question, _normalize
from .pools import (
    _BRACE_CLAUSES,
    _FINAL_STEPS,
    _GENERIC_STEPS,
    _NONASCII_CLAUSES,
    _TASK_STEPS,
    _TRIGGER_CLAUSES,
    _TRIGGER_PHRASES,
    _VIDEO_SOURCES,
    LETTERS,
    TASKS,
)


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


class RunCheckpoints:
    """One sample run's checkpoints: its constants (name, task topic vectors, a video pool),
    each library from the one before, each batch of episodes from its library."""

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
