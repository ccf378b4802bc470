"""Byte-identity with the original script, on every clone: against committed golden files.

tests/golden/ holds small runs and what the ORIGINAL script wrote for them (state files,
and prompts under the bundled template and under a stand-in inference side with literal
braces, format specs and non-ASCII text); tests/golden/make_golden.py regenerates them.
Where the original is present (../shared/reference), it is run again and must still agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from golden.make_golden import (
    EXPECTED,
    GOLDEN,
    INFER_SETTINGS,
    RUNS,
    STANDIN,
    TEMPLATES,
    original_outputs,
)

from statepool_dagster import compat, load_prompts
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.config import Settings

from instance_helpers import new_instance
from store_helpers import store_pool

RUN_NAMES = sorted(p.name for p in RUNS.iterdir() if p.is_dir())


def golden_pool() -> dict[str, dict[str, bytes]]:
    return {
        run: {p.name: p.read_bytes() for p in (EXPECTED / "state_pool" / run).iterdir()}
        for run in RUN_NAMES
    }


def golden_prompts(template: str) -> dict[str, str]:
    folder = EXPECTED / "prompts" / template
    return {p.stem: p.read_bytes().decode("utf-8") for p in folder.iterdir()}


def _drop_infer() -> None:
    for name in [m for m in sys.modules if m == "infer" or m.startswith("infer.")]:
        del sys.modules[name]


@pytest.fixture
def standin(monkeypatch):
    """The stand-in inference side importable as ``infer``; its settings in the environment."""
    _drop_infer()
    monkeypatch.syspath_prepend(str(STANDIN))
    for field, value in INFER_SETTINGS.items():
        monkeypatch.setenv(Settings.env_name(field), value)
    yield
    _drop_infer()


def golden_store(tmp_path: Path, monkeypatch) -> Path:
    """The golden runs through ``statepool sync`` (the real Definitions) into a new store."""
    store = tmp_path / "store"
    monkeypatch.setenv("STATEPOOL_RUNS_DIR", str(RUNS))
    monkeypatch.setenv("STATEPOOL_STORE_DIR", str(store))
    with new_instance(tmp_path / "home") as instance:
        summary = sync(instance)
    assert not summary.failed, [o.error for o in summary.failed]
    return store


def test_the_golden_files_are_few_and_small():
    files = [p for p in GOLDEN.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert sum(p.stat().st_size for p in files) < 400_000
    pool = golden_pool()
    assert set(pool) == {"golden000", "golden001", "unicode_run"}
    assert all(pool.values())
    for template in TEMPLATES:
        assert len(golden_prompts(template)) == sum(len(f) for f in pool.values())


def test_the_stand_in_template_uses_braces_format_specs_and_non_ascii():
    prompt = golden_prompts("standin")["unicode_run_ckpt2"]
    assert prompt.startswith("Kurator — Bibliothek v   2 (002 Karten) · 技能ライブラリ\n")
    assert '{"ops": [{"op": "add_card"' in prompt and prompt.endswith("{ende}\n")


def test_compat_collect_from_run_writes_the_golden_bytes(tmp_path):
    for run in RUN_NAMES:
        compat.collect_from_run(RUNS / run, str(tmp_path / run))
        ours = {p.name: p.read_bytes() for p in (tmp_path / run).iterdir()}
        assert ours == golden_pool()[run], run


def test_sync_writes_the_golden_state_files_and_bundled_prompts(tmp_path, monkeypatch):
    for name in INFER_SETTINGS:
        monkeypatch.delenv(Settings.env_name(name), raising=False)
    store = golden_store(tmp_path, monkeypatch)
    assert store_pool(store) == golden_pool()
    prompts = load_prompts(store)
    assert dict(zip(prompts["state_id"], prompts["prompt"], strict=True)) == golden_prompts(
        "bundled"
    )


def test_sync_renders_the_golden_prompts_under_the_stand_in(tmp_path, monkeypatch, standin):
    store = golden_store(tmp_path, monkeypatch)
    prompts = load_prompts(store)
    assert dict(zip(prompts["state_id"], prompts["prompt"], strict=True)) == golden_prompts(
        "standin"
    )


@pytest.mark.parametrize("template", TEMPLATES)
def test_compat_build_curator_prompt_equals_the_golden(template, request):
    if template == "standin":
        request.getfixturevalue("standin")
    expected = golden_prompts(template)
    for run in RUN_NAMES:
        for state in compat.load_state_pool(EXPECTED / "state_pool" / run):
            assert compat.build_curator_prompt(state) == expected[state.state_id], state.state_id


def test_the_live_original_still_writes_the_golden_files(seed, tmp_path):
    original_outputs(seed, RUNS, tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(EXPECTED) for p in EXPECTED.rglob("*") if p.is_file())
    assert written == committed
    for relative in written:
        assert (tmp_path / relative).read_bytes() == (EXPECTED / relative).read_bytes(), relative
