"""The asset checks read each checkpoint's facts from the table index, not the rows: their
results are the same as from the rows, on good and broken runs, and on a store written
before the stages kept those facts."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetCheckSeverity

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import PROMPTS, SNAPSHOTS, STATES
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.stages.job import OpenTables
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.parts import RunTable
from statepool_dagster.core.store.schemas import SCHEMAS
from statepool_dagster.defs.runs.checks import _CHECKS, run_checks
from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

SPEC = SampleSpec(n_checkpoints=4, n_cards=4, emb_dim=4, episodes_per_batch=3)
RUNS = ["good", "renamed", "no_episodes", "prompt_lost"]
FACTS = {SNAPSHOTS: ("version", "declared", "file"), STATES: ("state_id",), PROMPTS: ("state_id",)}


@pytest.fixture
def built(tmp_path: Path) -> Settings:
    runs = tmp_path / "runs"
    for i, name in enumerate(RUNS):
        generate_run(runs / name, SPEC, i)
    snapshots = runs / "renamed" / "snapshots"
    (snapshots / "skills_v2.json").rename(snapshots / "skills_v7.json")
    (runs / "no_episodes" / "episodes.jsonl").unlink()
    settings = Settings(runs_dir=str(runs), store_dir=str(tmp_path / "store"))
    for name in RUNS:
        build_run(settings, name)
    prompts = _table(settings, PROMPTS, "prompt_lost")
    prompts.drop(prompts.names()[1])  # a prompt gone from the store: its state has none
    prompts.save()
    return settings


def _table(settings: Settings, asset: str, run: str) -> RunTable:
    return RunTable(StoreLayout(settings.store_dir).table(asset, run), SCHEMAS[asset])


def _results(settings: Settings, run: str, tables: OpenTables | None = None) -> dict:
    results = run_checks(settings.store_dir, run, list(_CHECKS), tables)
    return {key.name: result for key, result in results}


def _strip_facts(settings: Settings, run: str) -> None:
    """Each checked table's parts written again without the facts the checks read, as a
    store of the stages before these facts were kept."""
    for asset, facts in FACTS.items():
        table = _table(settings, asset, run)
        for name in table.names():
            part = table.parts[name]
            info = {k: v for k, v in part.info.items() if k not in facts}
            table.write(name, table.read_part(name), part.key, info)
        table.save()
        stored = _table(settings, asset, run).parts.values()
        assert all(not set(facts) & p.info.keys() for p in stored)


def test_the_checks_tell_which_run_fails_which_check(built):
    results = {run: _results(built, run) for run in RUNS}
    assert set(results["good"]) == {"inputs_clean", "states_complete"}
    assert all(r["passed"] for r in results["good"].values())
    assert results["good"]["inputs_clean"]["description"] == (
        "no rejects, every snapshot paired, versions match"
    )
    assert results["good"]["states_complete"]["description"] == "4 states, each with its prompt"

    renamed = results["renamed"]["inputs_clean"]
    assert not renamed["passed"] and renamed["severity"] == AssetCheckSeverity.WARN
    assert renamed["metadata"]["mismatched_files"].value == ["renamed/snapshots/skills_v7.json"]
    assert renamed["metadata"]["skipped_versions"].value == [7]  # no episode batch 7 either
    assert renamed["metadata"]["rejects"] == 0
    assert renamed["description"] == (
        "1 snapshot without an episode batch (skipped); "
        "1 snapshot whose version differs from its file name's"
    )
    details = renamed["metadata"]["details"].value
    assert "- passed: no rejects" in details
    assert "**failed: 1 snapshot without an episode batch (skipped)**\n  - version 7" in details
    assert "**failed: 1 snapshot whose version differs" in details
    assert "  - renamed/snapshots/skills_v7.json" in details

    no_episodes = results["no_episodes"]
    clean = no_episodes["inputs_clean"]
    assert not clean["passed"]
    assert clean["metadata"]["skipped_versions"].value == [0, 1, 2, 3]
    assert clean["metadata"]["mismatched_files"].value == []
    assert clean["description"] == "4 snapshots without an episode batch (skipped)"
    assert "  - version 3" in clean["metadata"]["details"].value
    complete = no_episodes["states_complete"]
    assert not complete["passed"] and complete["severity"] == AssetCheckSeverity.ERROR
    assert complete["description"] == "no states from 4 snapshots"
    assert {k: complete["metadata"][k] for k in ("snapshots", "states")} == {
        "snapshots": 4,
        "states": 0,
    }

    lost = results["prompt_lost"]["states_complete"]
    assert not lost["passed"] and lost["severity"] == AssetCheckSeverity.ERROR
    assert lost["metadata"]["missing"].value == ["prompt_lost_ckpt1"]
    assert lost["description"] == "1 state without a prompt"
    assert results["prompt_lost"]["inputs_clean"]["passed"]


def test_a_builds_checks_read_its_tables_and_agree_with_a_check_launched_alone(built):
    for run in RUNS:
        tables = OpenTables(StoreLayout(built.store_dir))
        assert _results(built, run, tables) == _results(built, run)


def test_a_store_without_the_facts_is_checked_from_its_rows_with_the_same_results(built):
    before = {run: _results(built, run) for run in RUNS}
    for run in RUNS:
        _strip_facts(built, run)
    assert {run: _results(built, run) for run in RUNS} == before


def test_a_checkpoint_name_gives_back_its_version():
    from statepool_dagster.core.store.part_files import part_name, part_version

    for version in (0, 1, 7, 2**63 - 1, -1, -7, -(2**63)):
        assert part_version(part_name(version)) == version
