"""The exports inside real trainers: TRL's GRPOTrainer and verl's dataset and reward loader.

Everything is made here: sample runs synced by ``statepool sync``, exported by
``statepool export``, a tokenizer trained on their prompts with ``tokenizers`` (given a
chat template), and a two-layer Llama with random weights. Nothing is downloaded.
Needs the ``trainer`` extra (under ``CI=true`` its absence fails the tests).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from statepool_dagster import load_prompts
from statepool_dagster.demo.sample_runs import SampleSpec
from statepool_dagster.rewards import (
    agreement_reward,
    format_reward,
    trl_reward,
    validity_reward,
)

from cli_helpers import cli_env, local_sync, statepool
from process_helpers import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.trainer]  # trainers

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=3, emb_dim=2, episodes_per_batch=1)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}"
)
# The config the README documents (verl 0.9: `reward.custom_reward_function`, not top level).
VERL_REWARD_OVERRIDES = [
    "reward.custom_reward_function.path=pkg://statepool_dagster.rewards",
    "reward.custom_reward_function.name=compute_score",
]


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        unavailable(
            f"not installed: {', '.join(missing)} (pip install -e '.[trainer]')",
            "the trainer extra",
        )


def train_tokenizer(texts: list[str], folder: Path) -> Path:
    """A byte-level BPE trained on ``texts``, saved with a chat template: a local tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=800,
            special_tokens=["<|pad|>", "<|bos|>", "<|end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|bos|>", eos_token="<|end|>", pad_token="<|pad|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> SimpleNamespace:
    """A synced store, a tokenizer trained on its prompts, and its TRL and verl exports."""
    _need("tokenizers", "transformers")
    root = tmp_path_factory.mktemp("trainers")
    store = local_sync(root, SPEC)
    env = cli_env(SimpleNamespace(runs=root / "runs", store=store), root / "home")
    prompts = load_prompts(store)
    tokenizer = train_tokenizer([*prompts["prompt"], *prompts["reference_ops"]], root / "tok")
    exports = store / "exports"
    for fmt in ("trl", "verl"):
        out = exports / fmt
        statepool(
            env,
            root,
            "export",
            "--format",
            fmt,
            "--out",
            str(out),
            "--val-fraction",
            "0",
            "--parents",
        )
    return SimpleNamespace(root=root, store=store, env=env, tokenizer=tokenizer, exports=exports)


def test_export_counts_prompt_tokens_with_the_tokenizer(exported, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "trl"
    done = statepool(
        exported.env, exported.root, "export", "--format", "trl", "--out", str(out),
        "--val-fraction", "0", "--tokenizer", str(exported.tokenizer), "--json",
    )  # fmt: skip
    summary = json.loads(done.stdout)
    assert summary["prompt_lengths"]["method"].endswith("(chat template)")
    tokenizer = AutoTokenizer.from_pretrained(str(exported.tokenizer), local_files_only=True)
    rows = pq.read_table(out / "train.parquet").to_pylist()
    for row in rows:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)
        assert row["prompt_tokens"] == len(ids["input_ids"])
    assert summary["prompt_lengths"]["longest"] == max(r["prompt_tokens"] for r in rows)


def test_grpo_trainer_optimises_on_the_trl_export_with_our_rewards(exported, tmp_path):
    _need("trl", "torch")
    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    dataset = load_dataset(
        "parquet",
        data_files={"train": str(exported.exports / "trl" / "train.parquet")},
        split="train",
        cache_dir=str(tmp_path / "hf_cache"),
    )
    tokenizer = AutoTokenizer.from_pretrained(str(exported.tokenizer), local_files_only=True)
    longest = max(
        len(tokenizer.apply_chat_template(p, add_generation_prompt=True)["input_ids"])
        for p in dataset["prompt"]
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=longest + 64,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    rewarded: list[tuple[int, list[float]]] = []

    @functools.wraps(trl_reward)
    def recorded_trl_reward(prompts, completions, **kwargs):
        scores = trl_reward(prompts, completions, **kwargs)
        rewarded.append((len(completions), scores))
        return scores

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-3,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        reward_weights=[1.0, 0.0, 0.0, 0.0],
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[recorded_trl_reward, format_reward, validity_reward, agreement_reward],
        args=args,
        train_dataset=dataset,
    )
    trainer.train()

    assert trainer.state.global_step == 2
    assert sum(n for n, _ in rewarded) == 2 * args.per_device_train_batch_size
    assert all(n == len(scores) for n, scores in rewarded)
    assert all(isinstance(s, float) and math.isfinite(s) for _, scores in rewarded for s in scores)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2
    for entry in logged:
        for name in ("trl_reward", "format_reward", "validity_reward", "agreement_reward"):
            assert f"rewards/{name}/mean" in entry, sorted(entry)
        assert "statepool/format" in entry and "statepool/validity" in entry


def _verl_config(train_files: Path, max_prompt_length: int, cache: Path):
    from hydra import compose, initialize_config_dir
    from verl.trainer import config as verl_config

    with initialize_config_dir(
        config_dir=str(Path(verl_config.__file__).parent), version_base=None
    ):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                f"data.train_files={train_files}",
                f"data.max_prompt_length={max_prompt_length}",
                "data.filter_overlong_prompts=True",
                f"+data.cache_dir={cache}",
                *VERL_REWARD_OVERRIDES,
            ],
        )


def _verl_dataset(files: Path, max_prompt_length: int, tokenizer, cache: Path):
    from verl.trainer.ppo.utils import create_rl_dataset

    config = _verl_config(files, max_prompt_length, cache)
    return config, create_rl_dataset(config.data.train_files, config.data, tokenizer, None)


def test_verl_reads_the_export_and_drops_exactly_what_the_export_left_out(exported, tmp_path):
    _need("verl", "torch")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(exported.tokenizer), local_files_only=True)
    full = pq.read_table(exported.exports / "verl" / "train.parquet").to_pylist()
    lengths = sorted(
        len(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True)["input_ids"])
        for r in full
    )
    limit = lengths[len(lengths) // 2]  # about half the prompts fit
    _, verl_full = _verl_dataset(
        exported.exports / "verl" / "train.parquet", limit, tokenizer, tmp_path / "c1"
    )
    kept_by_verl = {verl_full[i]["extra_info"]["state_id"] for i in range(len(verl_full))}

    out = tmp_path / "verl_limited"
    done = statepool(
        exported.env, exported.root, "export", "--format", "verl", "--out", str(out),
        "--val-fraction", "0", "--tokenizer", str(exported.tokenizer),
        "--max-prompt-tokens", str(limit), "--json",
    )  # fmt: skip
    summary = json.loads(done.stdout)
    _, verl_limited = _verl_dataset(out / "train.parquet", limit, tokenizer, tmp_path / "c2")
    items = [verl_limited[i] for i in range(len(verl_limited))]
    assert {item["extra_info"]["state_id"] for item in items} == kept_by_verl
    assert len(items) == summary["rows"]["train"] < len(full)
    assert (
        set(summary["prompt_lengths"]["left_out"])
        == {r["extra_info"]["state_id"] for r in full} - kept_by_verl
    )
    prompts = dict(
        zip(*(load_prompts(exported.store)[c] for c in ("state_id", "prompt")), strict=True)
    )
    for item in items:
        info = item["extra_info"]
        assert list(item["raw_prompt"]) == [{"role": "user", "content": prompts[info["state_id"]]}]
        assert info["prompt_tokens"] <= limit
        assert json.loads(info["state"])["state_id"] == info["state_id"]
        assert item["reward_model"]["ground_truth"] == json.dumps(
            json.loads(info["reference_ops"])["ops"], ensure_ascii=False
        )


def test_verls_reward_loader_scores_a_reference_answer_top(exported, tmp_path):
    _need("verl", "torch")
    import numpy as np
    import torch
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager

    tokenizer = AutoTokenizer.from_pretrained(str(exported.tokenizer), local_files_only=True)
    config, dataset = _verl_dataset(
        exported.exports / "verl" / "train.parquet", 10**6, tokenizer, tmp_path / "cache"
    )
    assert get_custom_reward_fn(config) is not None
    manager = load_reward_manager(config, tokenizer)
    items = [dataset[i] for i in range(len(dataset))]
    changing = next(i for i in items if json.loads(i["reward_model"]["ground_truth"]))

    def reward(item, answer: str) -> dict:
        prompt = tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True)
        response = tokenizer(answer, add_special_tokens=False)["input_ids"]
        response.append(tokenizer.eos_token_id)
        length = len(prompt["input_ids"]) + len(response)
        non_tensors = {}
        for key in ("data_source", "reward_model", "extra_info"):
            non_tensors[key] = np.empty(1, dtype=object)
            non_tensors[key][0] = dict(item[key]) if isinstance(item[key], dict) else item[key]
        data = DataProto.from_dict(
            tensors={
                "responses": torch.tensor([response]),
                "attention_mask": torch.ones(1, length, dtype=torch.long),
            },
            non_tensors=non_tensors,
        )
        return manager.loop.run_until_complete(manager.run_single(data))

    answer = "Reasoning first.\n```json\n" + changing["reward_model"]["ground_truth"] + "\n```"
    top = reward(changing, answer)
    assert top["reward_score"] == 1.0
    assert top["reward_extra_info"]["agreement"] == 1.0
    assert top["reward_extra_info"]["has_reference"] == 1.0
    assert reward(changing, "[]")["reward_score"] == 0.0
    assert reward(changing, "I cannot decide.")["reward_score"] == -1.0


def test_a_bare_tokenizer_json_counts_the_message_texts(exported):
    from tokenizers import Tokenizer

    from statepool_dagster.core.export.collect import export_rows
    from statepool_dagster.core.export.gate import LengthFilter, load_counter
    from statepool_dagster.core.export.rows import ExportOptions, ExportSet

    export = ExportSet(ExportOptions())
    counter = load_counter(str(exported.tokenizer / "tokenizer.json"))
    rows = list(export_rows(exported.store, export, LengthFilter(counter, None)))
    assert rows and export.prompt_lengths["method"].endswith("(message texts, no chat template)")
    tokenizer = Tokenizer.from_file(str(exported.tokenizer / "tokenizer.json"))
    for row in rows:
        expected = len(tokenizer.encode(str(row.prompt), add_special_tokens=False).ids)
        assert row.prompt_tokens == expected
