"""The live datasets inside real trainers: verl's dataset factory and v1 replay buffer, TRL's GRPO.

The pool grows while they run: a second process adds a run folder and syncs it.
Needs the ``trainer`` extra (under ``CI=true`` its absence fails the tests).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_trainers import SPEC, _need, _verl_config, train_tokenizer

from statepool_dagster import load_prompts
from statepool_dagster.core.feedback.recorder import FEEDBACK_ENV, SEAL_ENV, flush_all
from statepool_dagster.core.feedback.select import Selection, SelectionOptions
from statepool_dagster.core.feedback.stats_store import read_stats
from statepool_dagster.core.segments import SegmentWriter, iter_segment_lines, list_segments
from statepool_dagster.demo.sample_runs import generate_run

from helpers import BIN, cli_env, local_sync

pytestmark = pytest.mark.trainer  # needs the trainer extra (.venv-trainer)

NEW_RUN = "run002"


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> SimpleNamespace:
    """A synced store of two sample runs and a tokenizer trained on its prompts."""
    _need("tokenizers", "transformers")
    root = tmp_path_factory.mktemp("live")
    store = local_sync(root, SPEC)
    prompts = load_prompts(store)
    tokenizer = train_tokenizer([*prompts["prompt"], *prompts["reference_ops"]], root / "tok")
    return SimpleNamespace(root=root, tokenizer=tokenizer)


def _copy(pool, tmp_path: Path) -> SimpleNamespace:
    """A private copy of the synced runs, store and Dagster home (tests add a run to it)."""
    root = tmp_path / "pool"
    for name in ("runs", "store", "home"):
        shutil.copytree(pool.root / name, root / name)
    ws = SimpleNamespace(runs=root / "runs", store=root / "store")
    return SimpleNamespace(root=root, store=ws.store, runs=ws.runs, env=cli_env(ws, root / "home"))


def _add_run_and_sync(copy: SimpleNamespace) -> subprocess.Popen:
    """A writer process: one more run folder, then ``statepool sync`` (its states land)."""
    generate_run(copy.runs / NEW_RUN, SPEC, run_index=2)
    return subprocess.Popen(
        [str(BIN / "statepool"), "sync", "--quiet"], env=copy.env, cwd=copy.root,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_verl_loads_the_live_dataset_through_its_factory_and_grows_on_batch_end(pool, tmp_path):
    _need("verl", "torch")
    import numpy as np
    import torch
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.utils import create_rl_dataset

    from statepool_dagster.live.verl import LiveRLDataset

    copy = _copy(pool, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(pool.tokenizer), local_files_only=True)
    placeholder = copy.store / "exports"  # verl requires train_files; the pool is read instead
    placeholder.mkdir(exist_ok=True)
    (placeholder / "unused.parquet").write_bytes(b"")
    config = _verl_config(placeholder / "unused.parquet", 10**6, tmp_path / "cache")
    config.data.custom_cls.path = "pkg://statepool_dagster.live.verl"
    config.data.custom_cls.name = "LiveRLDataset"
    from omegaconf import open_dict

    with open_dict(config.data):
        config.data.statepool = {"store": str(copy.store)}
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    assert isinstance(dataset, LiveRLDataset)
    before = set(dataset.state_ids)
    assert len(dataset) == len(before) == 6 and not any(s.startswith(NEW_RUN) for s in before)
    item = dataset[0]
    assert item["extra_info"]["state_id"] in before

    writer = _add_run_and_sync(copy)
    assert writer.wait(timeout=300) == 0, writer.stderr.read()
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(2, 3, dtype=torch.long)},
        non_tensors={"uid": np.array(["a", "b"], dtype=object)},
    )
    dataset.on_batch_end(batch=batch)
    after = set(dataset.state_ids)
    assert before < after and {s for s in after - before} == {
        s for s in after if s.startswith(NEW_RUN)
    }
    # whatever index the sampler (sized for the old length) asks for, new states come first
    firsts = [dataset[i]["extra_info"]["state_id"] for i in range(len(after - before))]
    assert set(firsts) == after - before
    assert dataset[len(after) + 1]["extra_info"]["state_id"] == dataset.state_ids[1]  # wraps


@pytest.mark.slow
def test_grpo_on_the_live_pool_serves_new_states_and_stops_serving_flat_ones(
    pool, tmp_path, monkeypatch
):
    _need("trl", "torch")
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from statepool_dagster.live.trl import live_trl_dataset
    from statepool_dagster.rewards import trl_reward

    copy = _copy(pool, tmp_path)
    feedback = tmp_path / "feedback"
    monkeypatch.setenv(FEEDBACK_ENV, str(feedback))
    monkeypatch.setenv(SEAL_ENV, "0.01")  # seal at once: the next pull sees this step
    k = 3
    start_ids = list(load_prompts(copy.store)["state_id"])
    flat = start_ids[0]
    # An earlier run left two groups of this state that all scored the same.
    with SegmentWriter(feedback, "earlier-run") as earlier:
        for g in range(k - 1):
            for _ in range(2):
                earlier.append({"state_id": flat, "score": -1.0, "group": f"old{g}",
                                "time": 1.0 + g, "source": "trl", "step": g})  # fmt: skip

    tokenizer = AutoTokenizer.from_pretrained(str(pool.tokenizer), local_files_only=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=8192, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
    )  # fmt: skip
    dataset = live_trl_dataset(
        copy.store,
        options=SelectionOptions(drop_zero_variance=k),
        feedback=feedback,
        refresh_seconds=0.0,
    )
    writer = _add_run_and_sync(copy)
    served: list[tuple[int, list[str]]] = []

    @functools.wraps(trl_reward)
    def reward(prompts, completions, **kwargs):
        if len(served) == 2:  # the writer has had two steps: let it finish
            assert writer.wait(timeout=300) == 0, writer.stderr.read()
        served.append((kwargs["trainer_state"].global_step, list(kwargs["state_id"])))
        return trl_reward(prompts, completions, **kwargs)

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=2,
        max_completion_length=8, max_steps=8, learning_rate=1e-3, beta=0.0, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
        shuffle_dataset=False,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=[reward], args=args,
        train_dataset=dataset,
    )  # fmt: skip
    trainer.train()
    writer.wait(timeout=300)
    flush_all()

    assert trainer.state.global_step == 8
    seen = [sid for _, ids in served for sid in ids]
    assert any(sid.startswith(NEW_RUN) for sid in seen), seen  # not in the store at start
    assert not any(s.startswith(NEW_RUN) for s in start_ids)
    recorded = sum(1 for s in list_segments(feedback) for _ in iter_segment_lines(s.path)) - 2 * (
        k - 1
    )
    assert recorded == len(seen) == 8 * 4
    # The flat state: its k-th flat group came in training, then it was never served again.
    times_flat = sum(1 for _, ids in served if flat in ids)
    assert times_flat == 1, served
    others = [s for s in start_ids if s != flat]
    assert max(sum(1 for _, ids in served if s in ids) for s in others) >= 2
    stats = read_stats(copy.store)
    decision = Selection.from_table(SelectionOptions(drop_zero_variance=k), stats).decide(flat)
    assert not decision.keep and "zero reward std" in decision.reason


@pytest.mark.slow  # starts a local Ray cluster: TransferQueue's controller and storage are actors
# verl's own loader for custom samplers warns that it is deprecated (verl's call, not ours).
@pytest.mark.filterwarnings("ignore:.*load_extern_type' is deprecated:FutureWarning")
def test_verl_v1_builds_the_live_replay_buffer_and_its_sample_reloads_the_pool(pool, tmp_path):
    _need("verl", "torch", "transfer_queue", "ray")
    import ray
    import torch
    import transfer_queue as tq
    from omegaconf import OmegaConf, open_dict
    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from statepool_dagster.live.verl import LiveRLDataset
    from statepool_dagster.live.verl_v1 import LiveReplayBuffer, LiveReplayBufferAsync

    copy = _copy(pool, tmp_path)
    feedback = tmp_path / "feedback"
    k = 2
    flat = next(iter(load_prompts(copy.store)["state_id"]))

    def flat_group(name: str, step: int) -> None:
        with SegmentWriter(feedback, name) as writer:  # closed: sealed, the next fold sees it
            for _ in range(2):
                writer.append({"state_id": flat, "score": -1.0, "group": name,
                               "time": 1.0 + step, "source": "verl", "step": step})  # fmt: skip

    flat_group("earlier-run", 0)  # k - 1 flat groups: still served
    tokenizer = AutoTokenizer.from_pretrained(str(pool.tokenizer), local_files_only=True)
    placeholder = copy.store / "exports"
    placeholder.mkdir(exist_ok=True)
    (placeholder / "unused.parquet").write_bytes(b"")
    config = _verl_config(placeholder / "unused.parquet", 10**6, tmp_path / "cache")
    config.data.custom_cls.path = "pkg://statepool_dagster.live.verl"
    config.data.custom_cls.name = "LiveRLDataset"
    with open_dict(config.data):
        config.data.statepool = {
            "store": str(copy.store), "feedback": str(feedback),
            "select": {"drop_zero_variance": k},
        }  # fmt: skip
    sampler = config.trainer.v1.sampler
    sampler.custom_sampler.path = "pkg://statepool_dagster.live.verl_v1"
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    assert isinstance(dataset, LiveRLDataset)
    before = set(dataset.state_ids)
    assert flat in before and len(before) == 6

    # verl's own loader (load_extern_type) and constructor arguments for a custom sampler,
    # as PPOTrainer.__init__ calls them; refill_fn would draw prompts from the dataloader.
    def build(name: str, mode: str):
        sampler.custom_sampler.name = name
        trainer = SimpleNamespace(config=config, trainer_mode=mode,
                                  _add_prompts_to_generate=lambda n: None)  # fmt: skip
        return PPOTrainer._build_replay_buffer(trainer)

    buffers = [build("LiveReplayBuffer", "sync"), build("LiveReplayBufferAsync", "separate_async")]
    assert [type(b) for b in buffers] == [LiveReplayBuffer, LiveReplayBufferAsync]

    # One step later: its group of the flat state scored the same again, and a run was synced.
    flat_group("this-run", 1)
    writer = _add_run_and_sync(copy)
    assert writer.wait(timeout=300) == 0, writer.stderr.read()
    assert set(dataset.state_ids) == before  # nothing reloads until the trainer samples

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # controller + 1 unit
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        served = []
        for step, buffer in enumerate(buffers, start=1):
            # a finished GRPO group as verl's agent loop leaves it: prompt uid, trajectory uid_0_0
            uid = f"u{step}"
            prompt_tag = {"is_prompt": True, "status": "finished", "global_steps": step}
            tq.kv_put(key=uid, partition_id="train", tag=prompt_tag)
            tq.kv_put(
                key=f"{uid}_0_0", partition_id="train",
                fields={"rm_scores": torch.tensor([0.5])}, tag={"status": "finished"},
            )  # fmt: skip
            batch, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=1)
            assert (batch.keys, batch.partition_id, metrics) == ([f"{uid}_0_0"], "train", {})
            served.append(set(dataset.state_ids))
    finally:
        tq.close()
        ray.shutdown()

    after = served[0]
    new = {s for s in after if s.startswith(NEW_RUN)}
    assert new and after == (before - {flat}) | new  # new states in, the flat one out
    # the prompts verl draws next (the dataloader indexes the dataset) are the new states
    assert {dataset[i]["extra_info"]["state_id"] for i in range(len(new))} == new
    assert served[1] == after  # the async buffer reloads too (nothing changed since)
