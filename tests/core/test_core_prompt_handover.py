"""Prompts rendered by the states stage for the prompts stage of the same build: the same
table, rejects and report as prompts rendered from the stored states."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from statepool_dagster.core.runs.files import fingerprint_run
from statepool_dagster.core.stages import OpenTables, build_run
from statepool_dagster.core.stages.episodes import build_episodes
from statepool_dagster.core.stages.prompts import RenderedPrompts, build_prompts
from statepool_dagster.core.stages.snapshots import build_snapshots
from statepool_dagster.core.stages.states import build_states
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

from store_helpers import store_pool

SPEC = SampleSpec(n_runs=1, n_checkpoints=6, n_cards=3, emb_dim=4, episodes_per_batch=3)
RUN = "run000"


def _break_a_card(run: Path, version: int) -> None:
    """A card without a trigger: its library is kept, its prompt is a reject."""
    path = run / "snapshots" / f"skills_v{version}.json"
    library = json.loads(path.read_text())
    del library["cards"][0]["trigger"]
    path.write_text(json.dumps(library))


def _prompts(store: Path) -> list[dict]:
    table = pq.read_table(store / PROMPTS / RUN).sort_by("version")
    return table.to_pylist()


def _rejects(store: Path) -> list[str]:
    path = store / "rejects" / f"{RUN}.jsonl"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def run(tmp_path) -> Path:
    run = generate_run(tmp_path / "runs" / RUN, SPEC, 0)
    _break_a_card(run, 2)
    return run


def _build(run: Path, store: Path) -> dict:
    reports = build_run(Settings(runs_dir=str(run.parent), store_dir=str(store)), RUN)
    return {a: (r.rows, r.reused, r.values, r.markdown) for a, r in reports.items()}


@pytest.mark.parametrize("budget", [0, 40_000])
def test_handed_over_prompts_are_those_rendered_from_the_stored_states(
    run, tmp_path, monkeypatch, budget
):
    """All prompts handed over, some (the budget runs out) or none: one result."""
    whole = _build(run, tmp_path / "whole")
    with monkeypatch.context() as patch:
        patch.setattr(RenderedPrompts, "BUDGET", budget)
        part = _build(run, tmp_path / "part")
    assert part == whole
    assert _prompts(tmp_path / "part") == _prompts(tmp_path / "whole")
    assert _rejects(tmp_path / "part") == _rejects(tmp_path / "whole")
    assert any("trigger is missing" in line for line in _rejects(tmp_path / "whole"))
    assert store_pool(tmp_path / "part") == store_pool(tmp_path / "whole")
    append_checkpoint(run, SPEC, 0)  # grown: the newest prompts rendered again, the rest kept
    grown = _build(run, tmp_path / "whole")
    assert grown[PROMPTS][1] == grown[PROMPTS][0] - 1  # only the new checkpoint rendered
    assert _build(run, tmp_path / "fresh")[PROMPTS][:1] == grown[PROMPTS][:1]
    assert _prompts(tmp_path / "whole") == _prompts(tmp_path / "fresh")


def test_prompts_built_in_a_step_of_their_own_are_those_of_one_step(run, tmp_path):
    """A step without the prompts stage hands nothing over; the prompts stage of a later
    step renders from the stored states, to the same table, rejects and report."""
    whole = _build(run, tmp_path / "whole")
    settings = Settings(runs_dir=str(run.parent), store_dir=str(tmp_path / "split"))
    split = build_run(settings, RUN, (EPISODES, SNAPSHOTS, STATES))
    split |= build_run(settings, RUN, (PROMPTS,))
    assert {a: (r.rows, r.reused, r.values, r.markdown) for a, r in split.items()} == whole
    assert _prompts(tmp_path / "split") == _prompts(tmp_path / "whole")
    assert _rejects(tmp_path / "split") == _rejects(tmp_path / "whole")


def _states(settings: Settings, handover: RenderedPrompts | None = None) -> OpenTables:
    """The states of one step's first three stages (rendering their prompts into a
    ``handover``, if given); the tables it has open."""
    tables = OpenTables(StoreLayout(settings.store_dir))
    fingerprint = fingerprint_run(Path(settings.runs_dir) / RUN)
    build_episodes(RUN, settings, tables, fingerprint)
    build_snapshots(RUN, settings, tables, fingerprint)
    build_states(RUN, settings, tables, handover)
    return tables


def test_the_hand_over_keeps_within_its_budget():
    rendered = RenderedPrompts(Settings().prompt_spec())
    for i in range(100):
        rendered.put(f"s{i}", "r", "x" * (RenderedPrompts.BUDGET // 8), True, {})
    assert rendered.full()
    assert sum(rendered.take(f"s{i}", "r") is not None for i in range(100)) == 8
    assert not rendered.full()


def test_the_states_stage_hands_prompts_over_and_another_template_takes_none(run, tmp_path):
    """The hand-over holds the new states' prompts until the prompts stage takes them; a
    prompts stage under another template renders its own, the same as a fresh build's."""
    from statepool_dagster.core.prompts.spec import PromptSpec, bundled_text

    settings = Settings(runs_dir=str(run.parent), store_dir=str(tmp_path / "store"))
    handover = RenderedPrompts(settings.prompt_spec())
    tables = _states(settings, handover)
    assert handover._size > 0 and len(handover._entries) == SPEC.n_checkpoints
    build_prompts(RUN, tables, settings.prompt_spec(), handover)
    assert handover._size == 0 and not handover._entries  # every one taken

    other = PromptSpec.load(template=_other_template(tmp_path, bundled_text))
    settings = Settings(runs_dir=str(run.parent), store_dir=str(tmp_path / "o"))
    handover = RenderedPrompts(settings.prompt_spec())
    tables = _states(settings, handover)
    assert handover._entries  # rendered under the configured template
    build_prompts(RUN, tables, other, handover)
    fresh = Settings(runs_dir=str(run.parent), store_dir=str(tmp_path / "f"))
    build_prompts(RUN, _states(fresh), other)
    assert _prompts(tmp_path / "o") == _prompts(tmp_path / "f")
    rendered = [row["prompt"] for row in _prompts(tmp_path / "o") if row["prompt"]]
    assert rendered and all(prompt.startswith("OTHER") for prompt in rendered)


def _other_template(tmp_path: Path, bundled_text) -> str:
    path = tmp_path / "other.txt"
    path.write_text("OTHER\n" + bundled_text("curator_prompt.txt"), encoding="utf-8")
    return str(path)


def test_a_prompt_spec_that_fails_to_load_stops_the_prompts_stage_alone(run, tmp_path):
    """The step runner loads the spec once; if it cannot, the episodes, snapshots and states
    stages still build, and the prompts stage raises the loader's error."""
    from statepool_dagster.core.errors import StatepoolError
    from statepool_dagster.core.stages import build_stages

    store = tmp_path / "store"
    settings = Settings(
        runs_dir=str(run.parent), store_dir=str(store), prompt_template=str(tmp_path / "gone.txt")
    )
    built = []
    with pytest.raises(StatepoolError, match=r"gone\.txt"):
        for asset, report in build_stages(RUN, settings, OpenTables(StoreLayout(str(store)))):
            built.append((asset, report.rows))
    assert [asset for asset, _ in built] == [EPISODES, SNAPSHOTS, STATES]
    assert dict(built)[STATES] == SPEC.n_checkpoints
    assert not (store / PROMPTS / RUN).exists()
