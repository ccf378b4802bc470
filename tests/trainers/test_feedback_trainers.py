"""The live datasets inside real trainers: verl's dataset factory and v1 replay buffer, TRL's GRPO.

The pool grows while they run: a second process (``statepool ingest``, a rollout writer
as any other) seals new states into a session folder the live pool reads directly, with
no Dagster run in between. Needs the ``trainer`` extra (under ``CI=true`` its absence
fails the tests).
"""

from __future__ import annotations

import functools
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_trainers import _need, _verl_config

from statepool_dagster import load_prompts
from statepool_dagster.core.feedback.folders import stats_folder
from statepool_dagster.core.feedback.recorder import FEEDBACK_ENV, SEAL_ENV, flush_all
from statepool_dagster.core.feedback.select import Selection, SelectionOptions
from statepool_dagster.core.feedback.stats_store import read_stats
from statepool_dagster.core.segments import SegmentWriter, iter_segment_lines, list_segments

from cli_helpers import STATEPOOL, cli_env, sync_json
from store_helpers import generated_state

pytestmark = pytest.mark.trainer  # needs the trainer extra (.venv-trainer)

SESSION = "rollouts"


@pytest.fixture(scope="module")
def pool(tokenized_store) -> SimpleNamespace:
    """A synced store of two sample runs and a tokenizer trained on its prompts."""
    return tokenized_store


def _copy(pool, tmp_path: Path) -> SimpleNamespace:
    """A private copy of the synced store, and an empty sessions folder for writers."""
    root = tmp_path / "pool"
    for name in ("runs", "store", "home"):
        shutil.copytree(pool.root / name, root / name)
    ws = SimpleNamespace(runs=root / "runs", store=root / "store")
    env = cli_env(ws, root / "home")
    env["STATEPOOL_SESSIONS_DIR"] = str(root / "sessions")
    return SimpleNamespace(root=root, store=ws.store, sessions=root / "sessions", env=env)


def big_state(k: int) -> dict:
    """A generated state whose library makes a long prompt."""
    state = generated_state(k)
    cards = [{"card_id": f"c{i}", "trigger": f"when {i} " * 20, "program": "do " * 40}
             for i in range(12)]  # fmt: skip
    state["lib_snapshot"]["cards"] = cards
    return state


def seal(copy: SimpleNamespace, states: list[dict], step: int) -> subprocess.Popen:
    """A writer process: ``statepool ingest`` seals ``states`` into the session."""
    path = copy.root / f"states-{step}.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in states), encoding="utf-8")
    return subprocess.Popen(
        [str(STATEPOOL), "ingest", str(path), "--session", SESSION, "--policy-step", str(step),
         "--quiet"], env=copy.env, cwd=copy.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def sealed(copy: SimpleNamespace, states: list[dict], step: int) -> None:
    writer = seal(copy, states, step)
    assert writer.wait(timeout=120) == 0, writer.stderr.read()


def flat_group(feedback: Path, state_id: str, name: str, step: int) -> None:
    """One GRPO group of ``state_id`` whose two answers scored the same (sealed at once)."""
    with SegmentWriter(feedback, name) as writer:
        for _ in range(2):
            writer.append({"state_id": state_id, "score": -1.0, "group": name,
                           "time": 1.0 + step, "source": "verl", "step": step})  # fmt: skip


def _live_verl_config(copy, tokenizer_limit: int, tmp_path: Path, **statepool):
    from omegaconf import open_dict

    placeholder = copy.root / "unused.parquet"  # verl requires train_files; the pool is read
    placeholder.write_bytes(b"")
    config = _verl_config(placeholder, tokenizer_limit, tmp_path / "cache")
    config.data.custom_cls.path = "pkg://statepool_dagster.trainers.verl"
    config.data.custom_cls.name = "LiveRLDataset"
    with open_dict(config.data):
        config.data.statepool = {"store": str(copy.store), "sessions": str(copy.sessions),
                                 "cache_dir": str(tmp_path), **statepool}  # fmt: skip
    return config


def _prompt_tokens(tokenizer, prompt: str) -> int:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                        add_generation_prompt=True)  # fmt: skip
    return len(ids["input_ids"])


def test_verl_live_dataset_grows_on_batch_end_and_keeps_its_indices(pool, tmp_path):
    _need("verl", "torch")
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.utils import create_rl_dataset

    from statepool_dagster.trainers.verl import LiveRLDataset

    copy = _copy(pool, tmp_path)
    feedback = tmp_path / "feedback"
    tokenizer = AutoTokenizer.from_pretrained(str(pool.tokenizer), local_files_only=True)
    limit = max(_prompt_tokens(tokenizer, p) for p in load_prompts(copy.store)["prompt"])
    config = _live_verl_config(
        copy, limit, tmp_path, feedback=str(feedback), select={"drop_zero_variance": 1}
    )
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    assert isinstance(dataset, LiveRLDataset)
    before = dataset.state_ids
    assert len(dataset) == len(before) == len(set(before)) == 6
    assert dataset[0]["extra_info"]["state_id"] == before[0]
    folded = stats_folder(copy.store)  # the feedback fold writes there, as `statepool feedback`
    store_files = sorted(p for p in copy.store.rglob("*") if not p.is_relative_to(folded))

    # Training goes on: a rollout worker seals four states and a long one, and a group of
    # the state at index 1 scored all the same (the selection now leaves it out).
    sealed(copy, [generated_state(k) for k in range(4)] + [big_state(9)], step=1)
    flat_group(feedback, before[1], "step1", 1)
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(2, 3, dtype=torch.long)},
        non_tensors={"uid": np.array(["a", "b"], dtype=object)},
    )
    dataset.on_batch_end(batch=batch)
    after = dataset.state_ids
    new = set(after) - set(before)
    assert len(new) == 4 and len(after) == 9 == len(set(after))  # the long one is not served
    # every index keeps its state, but index 1, whose state a new one took
    assert after[1] in new and after[:1] + after[2:6] == before[:1] + before[2:]
    assert {dataset[i]["extra_info"]["state_id"] for i in range(4)} == new  # new first
    assert all(dataset[i]["extra_info"]["session"] == SESSION for i in (1, 6, 7, 8))

    # exactly what verl itself keeps of the same rows at the same limit
    rows = [dataset.pool[i] for i in range(len(dataset.pool))]
    exported = tmp_path / "pool.parquet"
    pq.write_table(pa.Table.from_pylist(rows), exported)
    verl_config = _verl_config(exported, limit, tmp_path / "verl_cache")
    by_verl = create_rl_dataset(verl_config.data.train_files, verl_config.data, tokenizer, None)
    assert {by_verl[i]["extra_info"]["state_id"] for i in range(len(by_verl))} == set(after)
    long_id = next(r["extra_info"]["state_id"] for r in rows if r["extra_info"]["state_id"]
                   not in set(after))  # fmt: skip
    assert dataset.prompt_tokens[long_id] > limit
    served = dataset.dataframe
    assert [served[i]["extra_info"]["state_id"] for i in range(9)] == after

    # The pool shrinks, nothing new: the index of the state left out serves a served state.
    flat_group(feedback, before[3], "step2", 2)
    dataset.on_batch_end()
    shrunk = dataset.state_ids
    assert len(shrunk) == 9 and before[3] not in shrunk and shrunk[3] in set(after)
    assert [s for i, s in enumerate(shrunk) if i != 3] == [s for i, s in enumerate(after) if i != 3]
    assert dataset[len(shrunk) + 2]["extra_info"]["state_id"] == shrunk[2]  # past the end: wraps

    # The rows live memory-mapped in the process's own folder; the store is as it was.
    files = [Path(f["filename"]) for f in dataset.dataframe.cache_files]
    assert files and all(f.is_relative_to(tmp_path) and f.suffix == ".arrow" for f in files)
    assert sorted(p for p in copy.store.rglob("*") if not p.is_relative_to(folded)) == store_files


def test_verl_live_dataset_reads_again_the_rows_of_a_run_synced_again(pool, tmp_path):
    _need("verl", "torch")
    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset

    copy = _copy(pool, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(pool.tokenizer), local_files_only=True)
    config = _live_verl_config(copy, 10**6, tmp_path)
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    before = dataset.state_ids
    kept = [dataset.dataframe[i] for i in range(len(before))]

    # run000's episodes change (a batch's questions asked again); the store is synced again
    episodes = copy.root / "runs" / "run000" / "episodes.jsonl"
    lines = [json.loads(line) for line in episodes.read_text("utf-8").splitlines()]
    for line in lines:
        if line["skill_lib_version"] == 1:
            line["question"] += " (asked again)"
    episodes.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    assert sync_json(copy.env, copy.root)["failed"] == 0
    dataset.on_batch_end()
    assert dataset.state_ids == before and len(dataset) == len(before)  # same states, places
    ids = dataset.pool.state_ids()
    changed = set()
    for i, sid in enumerate(before):
        row, now = dataset.dataframe[i], dataset.pool[ids.index(sid)]  # the pool's row now
        assert (row["prompt"], row["extra_info"]["state"]) == (
            now["prompt"],
            now["extra_info"]["state"],
        ), sid
        if row != kept[i]:
            changed.add(sid)
    assert changed and {sid.rsplit("_ckpt", 1)[0] for sid in changed} == {"run000"}
    assert [dataset[i]["extra_info"]["state_id"] for i in range(len(before))] == before  # not new


def test_the_trl_stream_serves_a_state_sealed_while_it_streams(pool, tmp_path):
    from statepool_dagster.trainers.trl import live_rows

    copy = _copy(pool, tmp_path)
    stream = live_rows(str(copy.store), str(copy.sessions), refresh_seconds=0.0)
    first = [row["state_id"] for row in itertools.islice(stream, 8)]
    runs = sorted(load_prompts(copy.store)["state_id"])
    assert sorted(first[:6]) == runs and first[6:] == first[:2]  # each once, then round robin
    sealed(copy, [generated_state(k) for k in range(3)], step=1)
    rows = list(itertools.islice(stream, 7))
    assert [r["source"] for r in rows] == ["sessions"] * 3 + ["runs"] * 4  # new ones first
    assert [r["session"] for r in rows[:3]] == [SESSION] * 3
    assert [r["state_id"] for r in rows[3:]] == first[2:6]  # round robin goes on


def test_the_trl_stream_draws_by_weight_once_each_state_was_served(pool, tmp_path):
    from statepool_dagster.trainers.trl import live_rows

    copy = _copy(pool, tmp_path)
    feedback = tmp_path / "feedback"
    ids = sorted(load_prompts(copy.store)["state_id"])
    with SegmentWriter(feedback, "earlier-run") as writer:  # one group a state; one varied
        for sid in ids:
            for score in (-1.0, 1.0) if sid == ids[2] else (0.5, 0.5):
                writer.append({"state_id": sid, "score": score, "group": f"g-{sid}",
                               "time": 1.0, "source": "trl", "step": 0})  # fmt: skip
    stream = live_rows(str(copy.store), str(copy.sessions), options={"weight": "std"},
                       feedback=str(feedback), refresh_seconds=0.0)  # fmt: skip
    rows = list(itertools.islice(stream, 6 + 40))
    assert [r["state_id"] for r in rows[:6]] == ids  # each once, in the pool's order
    weights = {r["state_id"]: r["weight"] for r in rows[:6]}
    assert weights.pop(ids[2]) > 0 and set(weights.values()) == {0.0}
    assert {r["state_id"] for r in rows[6:]} == {ids[2]}  # then by weight: zero std never


@pytest.mark.slow
def test_grpo_on_the_live_pool_serves_states_sealed_in_training_and_drops_flat_ones(
    pool, tmp_path, monkeypatch
):
    _need("trl", "torch")
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from statepool_dagster.rewards import trl_reward
    from statepool_dagster.trainers.trl import live_trl_dataset

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
        sessions=copy.sessions,
        options=SelectionOptions(drop_zero_variance=k),
        feedback=feedback,
        refresh_seconds=0.0,
    )
    served: list[tuple[int, list[str], list[str]]] = []

    @functools.wraps(trl_reward)
    def reward(prompts, completions, **kwargs):
        step = kwargs["trainer_state"].global_step
        if not served:  # training has started: a rollout worker seals two states now
            sealed(copy, [generated_state(1), generated_state(2)], step=step)
        served.append((step, list(kwargs["state_id"]), list(kwargs["source"])))
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
    flush_all()

    assert trainer.state.global_step == 8
    seen = [sid for _, ids, _ in served for sid in ids]
    sealed_ids = {sid for _, ids, src in served for sid, s in zip(ids, src, strict=True)
                  if s == "sessions"}  # fmt: skip
    assert len(sealed_ids) == 2 and not sealed_ids & set(start_ids), served
    assert all(src == ["runs"] * 4 for _, _, src in served[:1])  # sealed after the first batch
    recorded = sum(1 for s in list_segments(feedback) for _ in iter_segment_lines(s.path)) - 2 * (
        k - 1
    )
    assert recorded == len(seen) == 8 * 4
    # The flat state: its k-th flat group came in training, then it was never served again.
    times_flat = sum(1 for _, ids, _ in served if flat in ids)
    assert times_flat == 1, served
    others = [s for s in start_ids if s != flat]
    assert max(sum(1 for _, ids, _ in served if s in ids) for s in others) >= 2
    stats = read_stats(copy.store)
    decision = Selection.from_table(SelectionOptions(drop_zero_variance=k), stats).decide(flat)
    assert not decision.keep and "zero reward std" in decision.reason


@pytest.mark.slow  # starts a local Ray cluster: TransferQueue's controller and storage are actors
# verl's own loader for custom samplers warns that it is deprecated (verl's call, not ours).
@pytest.mark.filterwarnings("ignore:.*load_extern_type' is deprecated:FutureWarning")
def test_verl_v1_builds_the_live_replay_buffer_and_its_sample_refreshes_the_pool(pool, tmp_path):
    _need("verl", "torch", "transfer_queue", "ray")
    import ray
    import torch
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from statepool_dagster.trainers.verl import LiveRLDataset
    from statepool_dagster.trainers.verl_v1 import LiveReplayBuffer, LiveReplayBufferAsync

    copy = _copy(pool, tmp_path)
    feedback = tmp_path / "feedback"
    k = 2
    flat = next(iter(load_prompts(copy.store)["state_id"]))
    flat_group(feedback, flat, "earlier-run", 0)  # k - 1 flat groups: still served
    tokenizer = AutoTokenizer.from_pretrained(str(pool.tokenizer), local_files_only=True)
    config = _live_verl_config(
        copy, 10**6, tmp_path, feedback=str(feedback), select={"drop_zero_variance": k}
    )
    sampler = config.trainer.v1.sampler
    sampler.custom_sampler.path = "pkg://statepool_dagster.trainers.verl_v1"
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    assert isinstance(dataset, LiveRLDataset)
    before = dataset.state_ids
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

    # One step later: its group of the flat state scored the same again; a worker sealed states.
    flat_group(feedback, flat, "this-run", 1)
    sealed(copy, [generated_state(j) for j in range(3)], step=1)
    assert dataset.state_ids == before  # nothing is read until the trainer samples

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
            served.append(dataset.state_ids)
    finally:
        tq.close()
        ray.shutdown()

    after = served[0]
    new = set(after) - set(before)
    assert len(new) == 3 and set(after) == (set(before) - {flat}) | new  # new in, flat out
    assert after[before.index(flat)] in new  # the flat state's index serves a new state
    # the prompts verl draws next (the dataloader indexes the dataset) are the new states
    assert {dataset[i]["extra_info"]["state_id"] for i in range(len(new))} == new
    assert served[1] == after  # the async buffer refreshes too (nothing changed since)


@pytest.mark.slow  # a trainer process: verl, torch and transformers imported
def test_the_live_verl_bench_runs_on_a_small_pool(pool, tmp_path):
    _need("verl", "torch")
    copy = _copy(pool, tmp_path)
    bench = Path(__file__).resolve().parents[2] / "bench" / "live_verl.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--store", str(copy.store), "--sessions", str(copy.sessions),
         "--tokenizer", str(pool.tokenizer), "--segments", "2", "--cache", str(tmp_path)],
        env=copy.env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["states_served"] == [6, 11, 16]
    assert len(result["on_batch_end_seconds"]) == 2 and result["on_batch_end_max"] > 0
    assert result["rss_anon_mb_imports"] <= result["rss_anon_mb_open"] <= result["vm_hwm_mb"]
