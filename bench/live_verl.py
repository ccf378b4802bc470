"""verl's live dataset on a synced pool: its open, then ``on_batch_end`` after each new segment.

.venv-trainer/bin/python bench/live_verl.py --store STORE --sessions SESSIONS
    [--tokenizer DIR] [--segments 5] [--states 5] [--max-prompt-length N] [--cache DIR]
    [--no-filter]

In ``.venv-trainer`` (verl, datasets, transformers). ``LiveRLDataset`` is built by verl's
own dataset factory (``create_rl_dataset``) from verl's Hydra config with the overrides
the docs give (``data.custom_cls``, ``data.statepool.store`` and ``.sessions``). Then
``--segments`` times: a writer seals one segment of ``--states`` new states into the
session ``live-verl-<pid>`` of ``SESSIONS`` (they stay there: run it on a copy of the
pool), and ``on_batch_end`` is timed, as verl's trainer calls it after a step. Without
``--tokenizer`` (a local folder), a small BPE with a chat template is trained on the
pool's first prompts. Every prompt is counted (``filter_overlong_prompts``) against
``--max-prompt-length`` (default: none is too long); ``--no-filter`` counts none, for a
quicker open (then ``on_batch_end`` counts nothing either).

Prints one JSON line: the open's seconds, each ``on_batch_end``'s seconds (their median
and largest, and the median of its process CPU seconds, steadier on a busy machine), the
states served before and after, and the process's memory: RssAnon (its own pages; the
memory-mapped rows are page cache) before the open (torch, verl and transformers
imported: most of it), after it and the largest after a step, and VmHWM (peak resident,
page cache included). The open reads and counts every prompt, as verl's own load does: at
100,000 states it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this file is in
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.live import LivePool

CHAT_TEMPLATE = (
    "{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
)
FIRST_PROMPTS = 200  # what the bench's own tokenizer is trained on


def status_mb(field: str) -> float:
    """A ``/proc/self/status`` figure (``RssAnon``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def new_state(k: int) -> dict:
    """A small state no pool holds yet (10 cards, one episode), ``live-verl-<k>``."""
    cards = [
        {"card_id": f"c{i}", "trigger": f"when {k % 97} " * 4, "program": f"do {i} " * 6}
        for i in range(10)
    ]
    return {
        "state_id": f"live-verl-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": cards},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}", "correct": k % 3 == 0}],
        "analysis": None,
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }


def bench_tokenizer(store: str, sessions: str, folder: Path) -> Path:
    """A byte-level BPE trained on the pool's first prompts, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    pool = LivePool(store, sessions=sessions)
    texts = [pool.export_row(i).prompt for i in range(min(FIRST_PROMPTS, len(pool)))]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<|pad|>", "<|bos|>", "<|end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe = trainers.BpeTrainer(vocab_size=2000, special_tokens=special, initial_alphabet=alphabet)
    tokenizer.train_from_iterator(texts, bpe)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|bos|>", eos_token="<|end|>", pad_token="<|pad|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return folder


def verl_config(args: argparse.Namespace, cache: Path):
    """verl's ``ppo_trainer`` config with the live dataset's overrides, as the docs give them."""
    from hydra import compose, initialize_config_dir
    from verl.trainer import config as verl_config_package

    placeholder = cache / "unused.parquet"  # verl requires train_files; the pool is read
    placeholder.write_bytes(b"")
    overrides = [
        f"data.train_files={placeholder}",
        "data.custom_cls.path=pkg://statepool_dagster.trainers.verl",
        "data.custom_cls.name=LiveRLDataset",
        f"+data.statepool.store={args.store}",
        f"+data.statepool.sessions={args.sessions}",
        f"+data.statepool.cache_dir={cache}",
        f"data.max_prompt_length={args.max_prompt_length}",
        f"data.filter_overlong_prompts={not args.no_filter}",
        "data.dataloader_num_workers=0",
    ]
    folder = str(Path(verl_config_package.__file__).parent)
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--sessions", required=True)
    parser.add_argument("--tokenizer", help="a local tokenizer folder (default: one trained here)")
    parser.add_argument("--segments", type=int, default=5)
    parser.add_argument("--states", type=int, default=5, help="states in each new segment")
    parser.add_argument("--max-prompt-length", type=int, default=10**7)
    parser.add_argument("--cache", help="where the dataset's Arrow files go (default: a temp)")
    parser.add_argument(
        "--no-filter",
        action="store_true",
        help="count no prompt (a quicker open; not verl's default)",
    )
    args = parser.parse_args()

    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset

    with tempfile.TemporaryDirectory(prefix="live-verl-", dir=args.cache) as tmp:
        cache = Path(tmp)
        folder = args.tokenizer or bench_tokenizer(args.store, args.sessions, cache / "tok")
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        config = verl_config(args, cache)
        anon_imports = status_mb("RssAnon")  # torch, verl, transformers and the tokenizer
        start = time.perf_counter()
        dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
        opened = time.perf_counter() - start
        served = [len(dataset)]
        anon_open = status_mb("RssAnon")
        anon, steps, cpus = anon_open, [], []
        session = f"live-verl-{os.getpid()}"
        base = os.getpid() * 1_000_000
        for segment in range(args.segments):
            with StateWriter(args.sessions, session, writer="bench") as writer:
                for j in range(args.states):
                    writer.append(new_state(base + segment * args.states + j), policy_step=segment)
            start, cpu = time.perf_counter(), time.process_time()
            dataset.on_batch_end()
            steps.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
            served.append(len(dataset))
            anon = max(anon, status_mb("RssAnon"))
    result = {
        "states_served": served,
        "open_seconds": round(opened, 3),
        "on_batch_end_seconds": [round(s, 4) for s in steps],
        "on_batch_end_median": round(statistics.median(steps), 4) if steps else None,
        "on_batch_end_max": round(max(steps), 4) if steps else None,
        "on_batch_end_cpu_median": round(statistics.median(cpus), 4) if cpus else None,
        "rss_anon_mb_imports": round(anon_imports, 1),
        "rss_anon_mb_open": round(anon_open, 1),
        "rss_anon_mb_max": round(anon, 1),
        "vm_hwm_mb": round(status_mb("VmHWM"), 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
