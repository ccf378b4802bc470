"""The trainer tests' shared store: synced once, copied (never written) by each test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_trainers import SPEC, _need, train_tokenizer

from statepool_dagster import load_prompts

from cli_helpers import local_sync


@pytest.fixture(scope="session")
def tokenized_store(tmp_path_factory) -> SimpleNamespace:
    """Two sample runs synced by ``statepool sync`` into ``root/store``, and a tokenizer
    trained on their prompts (``tokenizer``)."""
    _need("tokenizers", "transformers")
    root = tmp_path_factory.mktemp("tokenized")
    store = local_sync(root, SPEC)
    prompts = load_prompts(store)
    tokenizer = train_tokenizer([*prompts["prompt"], *prompts["reference_ops"]], root / "tok")
    return SimpleNamespace(root=root, store=store, tokenizer=tokenizer)
