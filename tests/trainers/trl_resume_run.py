"""One GRPO run on the live pool, as a trainer process: tests/trainers/test_resume.py starts it.

    python trl_resume_run.py CONFIG.json

The config names the store, the sessions folder, the tokenizer, the output folder, the
steps, the checkpoint to resume from, the step whose reward call SIGKILLs the process,
and states to seal at a step (as a rollout worker would). Every reward call appends its
``[global_step, state ids]`` to ``draws`` (flushed and synced: a kill loses none).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer

from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.trainers.trl import LivePoolCheckpoint, live_trl_dataset

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: helpers
from store_helpers import generated_state


def main(config: dict) -> None:
    tokenizer = AutoTokenizer.from_pretrained(config["tokenizer"], local_files_only=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=8192, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
    )  # fmt: skip
    dataset = live_trl_dataset(
        config["store"], sessions=config["sessions"], refresh_seconds=0.0, seed=3
    )
    draws = open(config["draws"], "a", encoding="utf-8")  # noqa: SIM115

    def reward(prompts, completions, **kwargs):
        step = kwargs["trainer_state"].global_step
        if step == config.get("kill_at"):
            os.kill(os.getpid(), signal.SIGKILL)
        draws.write(json.dumps([step, list(kwargs["state_id"])]) + "\n")
        draws.flush()
        os.fsync(draws.fileno())
        if step == config.get("seal_at"):
            with StateWriter(config["sessions"], "rollouts", writer="w") as writer:
                for k in config["seal"]:
                    writer.append(generated_state(k), policy_step=step)
        return [float(len(c[0]["content"]) % 3) for c in completions]

    args = GRPOConfig(
        output_dir=config["out"], per_device_train_batch_size=4, num_generations=2,
        max_completion_length=4, max_steps=config["steps"], learning_rate=1e-3, beta=0.0,
        logging_steps=1, report_to="none", save_strategy="steps", save_steps=2,
        use_cpu=True, seed=0, disable_tqdm=True, shuffle_dataset=False,
        ignore_data_skip=True,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=[reward], args=args,
        train_dataset=dataset, callbacks=[LivePoolCheckpoint()],
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=config.get("resume"))


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text()))
