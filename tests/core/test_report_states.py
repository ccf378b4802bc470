"""The report's state pages: each state's source, prompt, history chart and row versions, in
shards a static search page finds by hashing the id; and the Dagster asset's link to them."""

from __future__ import annotations

import html
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.feedback.recorder import FeedbackRecorder
from statepool_dagster.core.feedback.records import from_breakdown
from statepool_dagster.core.feedback.stats_store import read_history, update_stats
from statepool_dagster.core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from statepool_dagster.core.report import state_html, state_pages, write_report
from statepool_dagster.core.report.state_html import render_shard
from statepool_dagster.core.report.state_pages import (
    fnv1a,
    shard_count,
    shard_of,
    write_state_pages,
)
from statepool_dagster.core.sessions import StateWriter
from statepool_dagster.core.sessions.build import build_session
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_runs
from statepool_dagster.live import LivePool

from store_helpers import generated_state

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=3, emb_dim=2, episodes_per_batch=1)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> SimpleNamespace:
    """Two runs, a stored session, feedback over three steps folded, a pool version kept."""
    root = tmp_path_factory.mktemp("states")
    runs, store, sessions = root / "runs", root / "store", root / "sessions"
    generate_runs(runs, SPEC)
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for run in ("run000", "run001"):
        build_run(settings, run)
    with StateWriter(sessions, "rollouts", writer="w1") as writer:
        writer.append(generated_state(7), policy_step=5)
    build_session(sessions, store, "rollouts", settings.prompt_spec())
    pool = LivePool(store, sessions)
    version = pool.version()
    recorder = FeedbackRecorder(str(store / "feedback"))
    now = time.time()
    scores = {0: [1.0, 0.0], 1: [0.5, 0.5], 2: [1.0, 1.0, -1.0]}
    recorder.record(
        from_breakdown(
            "run000_ckpt1", {"score": s}, group=f"g{step}", time=now, source="trl", step=step
        )
        for step, group in scores.items()
        for s in group
    )
    recorder.close()
    update_stats(store, store / "feedback", close_seconds=0)
    write_report(store, runs_dir=runs)
    folder = store / "report" / "states"
    return SimpleNamespace(store=store, folder=folder, version=version, ids=pool.state_ids())


def _section(report, state_id: str) -> str:
    shards = len(list(report.folder.glob("[0-9]*.html")))
    page = (report.folder / f"{shard_of(state_id, shards)}.html").read_text(encoding="utf-8")
    match = re.search(
        rf'<section class="state" id="{re.escape(state_id)}">(.*?)</section>', page, re.S
    )
    assert match, f"{state_id} not in its shard"
    return match[1]


def test_every_state_has_a_section_in_the_shard_its_id_hashes_to(report):
    for sid in report.ids:
        _section(report, sid)
    index = (report.store / "report" / "index.html").read_text(encoding="utf-8")
    assert 'href="states/index.html"' in index and "7 states" in index


def test_a_run_states_page_shows_its_source_prompt_history_and_row_versions(report):
    section = _section(report, "run000_ckpt1")
    assert "run <b>run000</b>, checkpoint 1" in section
    assert "&lt;" in section or "<pre>" in section  # the prompt, escaped, in full
    marks = re.findall(
        r'class="mark" data-x="([^"]+)" data-y="([^"]+)" data-draws="(\d+)"', section
    )
    history = [r for r in read_history(report.store).to_pylist() if r["state_id"] == "run000_ckpt1"]
    assert [(x, float(y), int(d)) for x, y, d in marks] == [
        (str(r["step_first"]), r["score_mean"], r["draws"]) for r in history
    ]
    assert [float(y) for _, y, _ in marks] == pytest.approx([0.5, 0.5, 1 / 3])
    assert f"from pool version <code>{report.version}</code>" in section


def test_a_session_states_page_names_its_session_writer_and_policy_step(report):
    sid = next(s for s in report.ids if not s.startswith("run"))
    section = _section(report, sid)
    assert "session <b>rollouts</b>, writer w1, policy step 5" in section
    assert "no feedback recorded for it yet" in section


def test_pages_spilled_a_few_rows_at_a_time_are_the_pages_held_whole(report, tmp_path, monkeypatch):
    """Memory holds a few MB of rows; past that they go to temporary files and are read back
    by bucket: the pages are the same bytes either way."""
    whole = tmp_path / "whole"
    whole.mkdir()
    assert write_state_pages(StoreLayout(report.store), whole) == len(report.ids)
    monkeypatch.setattr(state_pages, "_FLUSH_CHARS", 64)  # a spill after every row or two
    spilled = tmp_path / "spilled"
    spilled.mkdir()
    assert write_state_pages(StoreLayout(report.store), spilled) == len(report.ids)
    names = sorted(p.name for p in whole.iterdir())
    assert names == sorted(p.name for p in spilled.iterdir())
    for name in names:
        assert (whole / name).read_bytes() == (spilled / name).read_bytes(), name


def test_the_search_page_hashes_the_id_as_the_shards_were_chosen(report):
    page = (report.folder / "index.html").read_text(encoding="utf-8")
    shards = int(re.search(r"const SHARDS = (\d+);", page)[1])
    assert shards == len(list(report.folder.glob("[0-9]*.html")))
    # FNV-1a, 32 bits, over UTF-8: the reference vectors the script's loop gives too
    assert (fnv1a(""), fnv1a("a"), fnv1a("foobar")) == (0x811C9DC5, 0xE40C292C, 0xBF9CF968)
    assert "Math.imul(h ^ b, 0x01000193) >>> 0" in page and "% SHARDS" in page


def test_shards_hold_about_32_states_so_a_page_stays_small_at_100000():
    assert shard_count(1) == 1 and shard_count(64) == 2 and shard_count(100_000) == 4096
    history = [
        {
            "step_first": s,
            "step_last": s,
            "draws": 1,
            "answers": 8,
            "score_mean": 0.1,
            "score_var": 0.2,
            "ops_match_rate": None,
            "weight_std": 0.4,
            "weight_pass_rate": None,
        }
        for s in range(128)
    ]
    states = {
        f"s{k}": {
            "source": {"run": "r", "checkpoint": k, "prompt": "p" * 8000},
            "history": history,
            "versions": [["v", "k"]],
        }
        for k in range(100_000 // 4096 + 1)
    }
    page = render_shard(0, 4096, states)
    assert len(page.encode()) < 1_500_000  # a local file of this size opens well under 1 s


def test_the_state_stats_asset_links_the_state_pages(tmp_path):
    from dagster import materialize

    from statepool_dagster.defs.feedback.assets import state_stats
    from statepool_dagster.defs.resources import StatepoolSettings

    store = tmp_path / "store"
    result = materialize(
        [state_stats], resources={"statepool": StatepoolSettings(store_dir=str(store))}
    )
    metadata = result.asset_materializations_for_node("state_stats")[0].metadata
    assert metadata["state_pages"].value == str(store / "report" / "states" / "index.html")
    assert Path(html.unescape(metadata["state_pages"].value)).name == "index.html"
    link = (store / "report" / "states" / "index.html").resolve().as_uri()
    assert metadata["state_pages_link"].value == link  # a link the UI opens


def test_the_pages_are_written_again_only_when_what_they_show_changed(tmp_path):
    runs, store = tmp_path / "runs", tmp_path / "store"
    generate_runs(
        runs, SampleSpec(n_runs=1, n_checkpoints=2, n_cards=3, emb_dim=2, episodes_per_batch=1)
    )
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), "run000")
    write_report(store, runs_dir=runs)
    search = store / "report" / "states" / "index.html"
    before = search.stat().st_ino
    write_report(store, runs_dir=runs)
    assert search.stat().st_ino == before  # nothing changed: the pages kept
    recorder = FeedbackRecorder(str(store / "feedback"))
    recorder.record(
        [
            from_breakdown(
                "run000_ckpt0", {"score": 1.0}, group="g", time=time.time(), source="trl", step=3
            )
        ]
    )
    recorder.close()
    update_stats(store, store / "feedback", close_seconds=0)
    write_report(store, runs_dir=runs)
    assert search.stat().st_ino != before
    page = (store / "report" / "states" / f"{shard_of('run000_ckpt0', 1)}.html").read_text()
    assert 'data-x="3"' in page


def _node() -> str | None:
    """A Node.js to run the page's script with: Playwright's own (a dev dependency), else the
    system's."""
    import shutil

    import playwright

    bundled = Path(playwright.__file__).parent / "driver" / "node"
    return str(bundled) if bundled.is_file() else shutil.which("node")


def test_the_search_pages_script_sends_an_id_to_the_shard_python_wrote_it_in(report):
    import json
    import subprocess

    node = _node()
    if node is None:
        pytest.skip("no Node.js to run the page's script")
    page = (report.folder / "index.html").read_text(encoding="utf-8")
    script = re.search(r"(const SHARDS = \d+;\s*function shard\(id\) \{.*?\n\})", page, re.S)[1]
    ids = [*report.ids, "ä-state", "状态_7", "emoji-😀", "a" * 300]
    for shards in (1, 2, 4096):
        code = script.replace(
            re.search(r"const SHARDS = \d+;", script)[0], f"const SHARDS = {shards};"
        )
        done = subprocess.run(
            [node, "-e", f"{code}\nconsole.log(JSON.stringify({json.dumps(ids)}.map(shard)))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert json.loads(done.stdout) == [shard_of(sid, shards) for sid in ids]


def test_a_huge_prompt_is_shown_cut_and_says_so():
    source = {"run": "r", "checkpoint": 1, "prompt": "p" * 10, "prompt_chars": 30_000_000}
    page = render_shard(0, 1, {"r_ckpt1": {"source": source, "history": [], "versions": []}})
    assert "30000000 characters; the first 10 shown, the whole one is in the store" in page


def test_a_prompt_is_escaped_in_its_bytes_as_html_escape_escapes_its_text():
    text = "é <b>&amp;</b> \"q\" 'a' ✓ \U0001f600 \\u0000"
    assert state_pages._escape_utf8(text.encode()) == html.escape(text).encode()


def test_a_page_read_from_the_store_shows_a_long_prompt_cut(tmp_path):
    runs, store = tmp_path / "runs", tmp_path / "store"
    generate_runs(runs, SampleSpec(n_runs=1, n_checkpoints=3, n_cards=700, emb_dim=2))
    build_run(Settings(runs_dir=str(runs), store_dir=str(store)), "run000")
    folder = tmp_path / "pages"
    folder.mkdir()
    assert write_state_pages(StoreLayout(store), folder) == 3
    page = "".join(p.read_text(encoding="utf-8") for p in folder.glob("[0-9]*.html"))
    shown = state_html.PROMPT_SHOWN
    prompts = pq.read_table(store / "curator_prompts" / "run000")["prompt"].to_pylist()
    assert any(len(p) > shown for p in prompts)  # else this shows nothing
    for prompt in prompts:
        cut = f"; the first {shown:,} shown, the whole one is in the store"
        summary = f"prompt ({len(prompt)} characters{cut if len(prompt) > shown else ''})"
        assert f"<summary>{summary}</summary><pre>{html.escape(prompt[:shown])}</pre>" in page


def _pages(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def test_each_runs_kept_prompts_give_the_pages_a_read_of_every_table_gives(tmp_path):
    """A report keeps each run's shown prompts; the next one reads only a changed run's table,
    and a kept file cut short, or of a run gone from the store, is never used."""
    runs, store = tmp_path / "runs", tmp_path / "store"
    spec = SampleSpec(n_runs=3, n_checkpoints=3, n_cards=3, emb_dim=2, episodes_per_batch=1)
    generate_runs(runs, spec)
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for run in ("run000", "run001", "run002"):
        build_run(settings, run)
    layout = StoreLayout(store)
    kept = store / "report" / ".state-prompts"

    def same_as_plain() -> None:
        write_report(store, runs_dir=runs)
        plain = tmp_path / f"plain{time.monotonic_ns()}"
        plain.mkdir()
        write_state_pages(layout, plain)
        assert _pages(store / "report" / "states") == _pages(plain)

    same_as_plain()
    assert sorted(p.name for p in kept.iterdir()) == [f"run00{i}.kept" for i in range(3)]
    held = {p.name: p.stat().st_ino for p in kept.iterdir()}
    append_checkpoint(runs / "run001", spec, 1)
    build_run(settings, "run001")
    same_as_plain()
    now = {p.name: p.stat().st_ino for p in kept.iterdir()}
    assert [n for n in held if now[n] != held[n]] == ["run001.kept"]  # the others reused
    cut = kept / "run002.kept"
    cut.write_bytes(cut.read_bytes()[:-3])
    (store / "report" / "states" / ".stamp").unlink()  # the pages are written again
    same_as_plain()
    assert cut.stat().st_size > 0 and cut.stat().st_ino != now["run002.kept"]
    for table in (EPISODES, SNAPSHOTS, STATES, PROMPTS):
        shutil.rmtree(store / table / "run000")  # the run gone from the store
    same_as_plain()
    assert "run000.kept" not in {p.name for p in kept.iterdir()}


def test_after_a_few_runs_changed_only_their_states_shards_are_written_again(tmp_path):
    """A run grown by a checkpoint, a run gone, a run new: the shards holding their states are
    written again (a state with feedback history keeps it), every other shard is the last
    report's file; the pages are byte for byte those a full write gives."""
    runs, store = tmp_path / "runs", tmp_path / "store"
    spec = SampleSpec(n_runs=48, n_checkpoints=3, n_cards=2, emb_dim=2, episodes_per_batch=1)
    generate_runs(runs, spec)
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for i in range(48):
        build_run(settings, f"run{i:03d}")
    recorder = FeedbackRecorder(str(store / "feedback"))
    now = time.time()
    recorder.record(
        [from_breakdown("run005_ckpt1", {"score": 0.5}, group="g", time=now, source="trl", step=2)]
    )
    recorder.close()
    update_stats(store, store / "feedback", close_seconds=0)
    folder = store / "report" / "states"
    write_report(store, runs_dir=runs)
    shards = len(list(folder.glob("[0-9]*.html")))
    assert shards == 8

    def rewritten(change) -> set[str]:
        before = {p.name: p.stat().st_ino for p in folder.iterdir()}
        change()
        write_report(store, runs_dir=runs)
        plain = tmp_path / f"plain{time.monotonic_ns()}"
        plain.mkdir()
        write_state_pages(StoreLayout(store), plain)
        assert _pages(folder) == _pages(plain)
        return {p.name for p in folder.glob("[0-9]*.html") if before[p.name] != p.stat().st_ino}

    def grow() -> None:
        append_checkpoint(runs / "run005", spec, 5)
        build_run(settings, "run005")

    shards_of = {f"{shard_of(f'run005_ckpt{k}', shards)}.html" for k in range(4)}
    assert rewritten(grow) == shards_of
    assert 'data-x="2"' in _section(SimpleNamespace(folder=folder), "run005_ckpt1")

    def drop() -> None:
        for table in (EPISODES, SNAPSHOTS, STATES, PROMPTS):
            shutil.rmtree(store / table / "run010")

    assert rewritten(drop) == {f"{shard_of(f'run010_ckpt{k}', shards)}.html" for k in range(3)}
    assert "run010.kept" not in {p.name for p in (store / "report" / ".state-prompts").iterdir()}

    def add() -> None:
        generate_runs(runs, SampleSpec(**{**vars(spec), "n_runs": 49}))
        build_run(settings, "run048")

    assert rewritten(add) == {f"{shard_of(f'run048_ckpt{k}', shards)}.html" for k in range(3)}

    def grow_with_a_page_gone() -> None:
        spared = {f"{shard_of(f'run020_ckpt{k}', shards)}.html" for k in range(4)}
        (folder / next(f"{k}.html" for k in range(shards) if f"{k}.html" not in spared)).unlink()
        append_checkpoint(runs / "run020", spec, 20)
        build_run(settings, "run020")

    assert len(rewritten(grow_with_a_page_gone)) == shards  # all written again


def test_a_shard_gives_back_its_sections_by_id_unless_an_id_did_not_survive_the_page():
    from statepool_dagster.core.report.state_html import shard_bytes, shard_sections

    def page(*ids: str) -> bytes:
        return shard_bytes(0, 1, {i: {"history": [], "versions": []} for i in ids})

    sections = shard_sections(page('r<1>_ckpt0 & "q"', "r2_ckpt1"))
    assert sorted(sections) == sorted(['r<1>_ckpt0 & "q"', "r2_ckpt1"])
    assert all(s.startswith(b'<section class="state"') for s in sections.values())
    assert shard_sections(page("a\udc80")) is None  # written as a backslash escape
    assert shard_sections(page("a\\b")) is None
    assert shard_sections(page("a")[:-3]) is None  # not a whole page
