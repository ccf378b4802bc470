"""verl's legacy training loop over the live dataset, as a trainer process:
tests/trainers/test_resume.py starts it.

    python verl_resume_run.py CONFIG.json

What ``RayPPOTrainer.fit`` does with its data (``mode: legacy``), or the v1 trainer
(``mode: v1``: prompts fetched one at a time, the live datasets refreshed by
``LiveReplayBuffer.sample`` after them, the checkpoint saved after the step), without the
model: the dataset from
``data.custom_cls`` (``LiveRLDataset``), verl's sampler (``create_rl_sampler``: torchdata's
``RandomSampler``, seeded), torchdata's ``StatefulDataLoader``; each step draws a batch,
saves ``data.pt`` (the dataloader's ``state_dict``) every ``save_freq`` steps and then calls
``on_batch_end``; a resume loads the latest ``data.pt`` as ``_load_checkpoint`` does. Every
batch's ``[step, state ids]`` is appended to ``draws`` (flushed and synced).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch
from omegaconf import open_dict
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import AutoTokenizer
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
from verl.utils.dataset.rl_dataset import collate_fn

from statepool_dagster.core.sessions import StateWriter

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: helpers
sys.path.insert(0, str(Path(__file__).parent))  # tests/trainers/: test_trainers
from test_trainers import _verl_config

from store_helpers import generated_state


def main(config: dict) -> None:
    out = Path(config["out"])
    placeholder = out.parent / "unused.parquet"  # verl requires train_files; the pool is read
    placeholder.write_bytes(b"")
    verl = _verl_config(placeholder, 10**6, out.parent / "cache")
    verl.data.custom_cls.path = "pkg://statepool_dagster.trainers.verl"
    verl.data.custom_cls.name = "LiveRLDataset"
    verl.data.shuffle, verl.data.seed = True, 7
    with open_dict(verl.data):
        verl.data.statepool = {"store": config["store"], "sessions": config["sessions"],
                               "cache_dir": str(out.parent), "resume_from": str(out)}  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(config["tokenizer"], local_files_only=True)
    dataset = create_rl_dataset(verl.data.train_files, verl.data, tokenizer, None)
    v1 = config.get("mode") == "v1"
    sampler = create_rl_sampler(verl.data, dataset)
    loader = StatefulDataLoader(dataset, batch_size=1 if v1 else 2, num_workers=0,
                                drop_last=True, collate_fn=collate_fn, sampler=sampler)  # fmt: skip
    if v1:
        return run_v1(config, loader, out)
    step = 0
    latest = out / "latest_checkpointed_iteration.txt"
    if latest.is_file():  # _load_checkpoint
        step = int(latest.read_text())
        if step % len(loader):
            state = torch.load(out / f"global_step_{step}" / "data.pt", weights_only=True)
            loader.load_state_dict(state)
    draws = open(config["draws"], "a", encoding="utf-8")  # noqa: SIM115
    epoch = step // len(loader)
    step += 1
    while step <= config["steps"]:
        for batch in loader:
            if step == config.get("kill_at"):
                os.kill(os.getpid(), signal.SIGKILL)
            ids = [info["state_id"] for info in batch["extra_info"]]
            draws.write(json.dumps([step, ids]) + "\n")
            draws.flush()
            os.fsync(draws.fileno())
            if step == config.get("seal_at"):
                with StateWriter(config["sessions"], "rollouts", writer="w") as writer:
                    for k in config["seal"]:
                        writer.append(generated_state(k), policy_step=step)
            if step % 2 == 0:  # _save_checkpoint, before on_batch_end as in fit()
                folder = out / f"global_step_{step}"
                folder.mkdir(parents=True, exist_ok=True)
                torch.save(loader.state_dict(), folder / "data.pt")
                latest.write_text(str(step))
            dataset.on_batch_end(batch)
            step += 1
            if step > config["steps"]:
                return
        epoch += 1


def run_v1(config: dict, loader: StatefulDataLoader, out: Path) -> None:
    """The v1 trainer's data path: each step fetches two prompts one at a time (a new
    iterator when one ends, as ``_fetch`` does), the replay buffer's ``sample`` refreshes the
    live datasets, then the step is saved."""
    from statepool_dagster.trainers.verl import refresh_live_datasets

    done = 0
    latest = out / "latest_checkpointed_iteration.txt"
    if latest.is_file():
        done = int(latest.read_text())
        loader.load_state_dict(
            torch.load(out / f"global_step_{done}" / "data.pt", weights_only=True)
        )
    draws = open(config["draws"], "a", encoding="utf-8")  # noqa: SIM115
    it = None
    for step in range(done + 1, config["steps"] + 1):
        if step == config.get("kill_at"):
            os.kill(os.getpid(), signal.SIGKILL)
        ids = []
        for _ in range(2):
            try:
                batch = next(it) if it is not None else None
            except StopIteration:
                batch = None
            if batch is None:
                it = iter(loader)
                batch = next(it)
            ids.append(batch["extra_info"][0]["state_id"])
        draws.write(json.dumps([step, ids]) + "\n")
        draws.flush()
        os.fsync(draws.fileno())
        if step == config.get("seal_at"):
            with StateWriter(config["sessions"], "rollouts", writer="w") as writer:
                for k in config["seal"]:
                    writer.append(generated_state(k), policy_step=step)
        refresh_live_datasets()  # LiveReplayBuffer.sample, before the batch is trained on
        if step % 2 == 0:
            folder = out / f"global_step_{step}"
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(loader.state_dict(), folder / "data.pt")
            latest.write_text(str(step))


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text()))
