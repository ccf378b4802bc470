"""The pool report, store/report/index.html and a page per run under store/report/runs/:
written by the CLI and by training_dataset, self-contained, and its plots show the store's
numbers (parsed here, and checked in Debian's Chromium)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import AssetKey, instance_for_test

from statepool_dagster import load_prompts
from statepool_dagster.cli.sync import sync
from statepool_dagster.core.export.collect import collect_export
from statepool_dagster.core.export.rows import ExportOptions, split_of
from statepool_dagster.core.names import STATES
from statepool_dagster.core.report.page import COLUMNS
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.reading import read_run_table
from statepool_dagster.definitions import defs
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from browser_helpers import CHROMIUM, CHROMIUM_ARGS, require
from cli_helpers import cli_env
from instance_helpers import latest_metadata, new_instance

SPEC = SampleSpec(n_runs=3, n_checkpoints=4, n_cards=5, emb_dim=4, episodes_per_batch=4)
STATEPOOL = Path(sys.executable).with_name("statepool")
KINDS = {"add_card": "add", "update_card": "update", "delete_card": "delete"}


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> SimpleNamespace:
    """Sample runs (one with a bad episode line and a misnamed snapshot, one copied) synced
    into a temp instance, with training_dataset materialized through the real Definitions."""
    root = tmp_path_factory.mktemp("report")
    runs, store, home = root / "runs", root / "store", root / "home"
    generate_runs(runs, SPEC)
    with (runs / "run001" / "episodes.jsonl").open("a", encoding="utf-8") as f:
        f.write("{not json\n")
    shutil.copy(runs / "run001/snapshots/skills_v1.json", runs / "run001/snapshots/skills_v1.bak")
    shutil.copytree(runs / "run000", runs / "run000-copy")
    with pytest.MonkeyPatch.context() as env, new_instance(home) as instance:
        env.setenv("STATEPOOL_RUNS_DIR", str(runs))
        env.setenv("STATEPOOL_STORE_DIR", str(store))
        assert not sync(instance).failed
        result = (
            defs()
            .resolve_implicit_global_asset_job_def()
            .execute_in_process(instance=instance, asset_selection=[AssetKey("training_dataset")])
        )
        assert result.success
        metadata = latest_metadata(instance, "training_dataset")
    return SimpleNamespace(runs=runs, store=store, metadata=metadata, root=root)


def expected_numbers(runs: Path, store: Path) -> dict:
    """The report's figures, recomputed from the run files and the store's tables."""
    layout = StoreLayout(store)
    expected: dict = {"accuracy": {}, "cards": {}, "ops": {}, "states": {}}
    for run_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        run = run_dir.name
        by_version: dict[int, list[bool]] = {}
        for line in (run_dir / "episodes.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            by_version.setdefault(record["skill_lib_version"], []).append(bool(record["correct"]))
        expected["accuracy"][run] = {v: sum(c) / len(c) for v, c in sorted(by_version.items())}
        expected["cards"][run] = {
            int(p.name[len("skills_v") : -len(".json")]): len(
                json.loads(p.read_text(encoding="utf-8"))["cards"]
            )
            for p in (run_dir / "snapshots").glob("skills_v*.json")
        }
        ops = {}
        for row in read_run_table(layout, STATES, run).to_pylist():
            counts = dict.fromkeys(KINDS.values(), 0)
            for op in json.loads(row["reference_ops"])["ops"]:
                counts[KINDS[op["op"]]] += 1
            ops[row["version"]] = counts
        expected["ops"][run] = ops
        expected["states"][run] = len(list((store / "state_pool" / run).glob("*.json")))
    expected["prompt_chars"] = sorted(len(p) for p in load_prompts(store)["prompt"])
    expected["splits"] = collect_export(store, ExportOptions()).counts()
    return expected


def test_training_dataset_writes_the_report_and_links_it(synced):
    report = synced.store / "report" / "index.html"
    assert report.is_file()
    assert synced.metadata["report"] == str(report.resolve())
    assert synced.metadata["report_link"] == report.resolve().as_uri()


def test_training_dataset_shows_its_problems_as_text(synced):
    details = synced.metadata["problem_details"]
    assert synced.metadata["problems"] == len(details.splitlines())
    assert (
        f"- run000-copy: {SPEC.n_checkpoints} states identical to run000's left out "
        "(the earliest run by name keeps them)" in details
    )


def test_statepool_report_writes_a_page_that_fetches_nothing(synced, tmp_path):
    (synced.store / "report" / "index.html").unlink()
    env = cli_env(SimpleNamespace(runs=synced.runs, store=synced.store), tmp_path / "home")
    done = subprocess.run(
        [str(STATEPOOL), "report"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    page = Path(done.stdout.strip())
    assert page == synced.store / "report" / "index.html"
    pages = [page, *sorted((page.parent / "runs").glob("*.html"))]
    assert sorted(p.stem for p in pages[1:]) == sorted(p.name for p in synced.runs.iterdir())
    for path in pages:
        html = path.read_text(encoding="utf-8")
        assert not re.search(r"<script[^>]*\bsrc", html)  # inline script only
        assert not re.search(r"<link\b|\bsrc=", html)
        assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "https://" not in html


class _Page(HTMLParser):
    """The report's table lines and marks, as the browser test reads them, without a browser."""

    def __init__(self) -> None:
        super().__init__()
        self.svg: dict[str, str] | None = None
        self.marks: list[dict[str, str]] = []  # each mark with its chart's data-* attributes
        self.lines: dict[str, list[str]] = {}  # run -> its table cells' data-sort values
        self.line: list[str] | None = None
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self.svg = {f"chart_{k[5:]}": v for k, v in attrs.items() if k.startswith("data-")}
        elif "mark" in attrs.get("class", "").split() and self.svg is not None:
            self.marks.append(
                {**self.svg, **{k[5:]: v for k, v in attrs.items() if k.startswith("data-")}}
            )
        elif tag == "tr" and "data-run" in attrs:
            self.line = self.lines.setdefault(attrs["data-run"], [])
        elif tag == "td" and self.line is not None:
            self.line.append(attrs.get("data-sort", ""))
        elif tag == "a":
            self.links.append(attrs.get("href", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.svg = None
        elif tag == "tr":
            self.line = None

    def chart(self, name: str, **data: str) -> list[dict[str, str]]:
        return [
            m
            for m in self.marks
            if m.get("chart_chart") == name
            and all(m.get(f"chart_{k}") == v for k, v in data.items())
        ]


def _parsed(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_report_pages_hold_the_store_numbers(synced):
    """The overview's table and each run's page carry the store's figures in their marks."""
    expected = expected_numbers(synced.runs, synced.store)
    report = synced.store / "report"
    overview = _parsed(report / "index.html")
    columns = dict(zip(COLUMNS, zip(*overview.lines.values(), strict=True), strict=True))
    runs = list(overview.lines)
    assert sorted(runs) == sorted(expected["states"])
    assert dict(zip(runs, map(int, columns["states"]), strict=True)) == expected["states"]
    states = overview.chart("states")
    assert {m["x"]: int(float(m["y"])) for m in states} == expected["states"]
    assert {m["x"]: int(float(m["y"])) for m in overview.chart("splits")} == expected["splits"]
    lengths = overview.chart("prompt_chars")
    assert sum(int(m["y"]) for m in lengths) == len(expected["prompt_chars"])
    # run001 has a rejected line and an ignored file, run000-copy lost its states to run000
    assert runs[:2] == ["run000-copy", "run001"]
    assert overview.links[: len(runs)] == [f"runs/{run}.html" for run in runs]
    for run in runs:
        page = _parsed(report / "runs" / f"{run}.html")
        accuracy = page.chart("accuracy", run=run)
        assert {int(m["x"]): float(m["y"]) for m in accuracy} == expected["accuracy"][run]
        cards = page.chart("cards", run=run)
        assert {int(m["x"]): int(float(m["y"])) for m in cards} == expected["cards"][run]
        ops: dict[int, dict[str, int]] = {}
        for m in page.chart("ops", run=run):
            ops.setdefault(int(m["x"]), {})[m["kind"]] = int(m["y"])
        assert ops == expected["ops"][run]
        line = dict(zip(COLUMNS, overview.lines[run], strict=True))
        assert int(line["add"]) == sum(k["add"] for k in expected["ops"][run].values())
    run001 = (report / "runs" / "run001.html").read_text(encoding="utf-8")
    assert "1 reject;" in run001 and "skills_v1.bak" in run001
    assert dict(zip(COLUMNS, overview.lines["run001"], strict=True))["rejects"] == "1"


@pytest.mark.slow
def test_report_plots_render_and_match_the_store(synced, tmp_path):
    require(CHROMIUM.is_file(), f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "the playwright package is not installed (pip install -e '.[dev]')")
    expected = expected_numbers(synced.runs, synced.store)
    page_path = synced.store / "report" / "index.html"
    requested: list[str] = []

    def marks(page, selector: str) -> list[dict]:
        return page.eval_on_selector_all(
            f"{selector} .mark",
            "els => els.map(e => ({...e.dataset, w: e.getBoundingClientRect().width,"
            " h: e.getBoundingClientRect().height}))",
        )

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900}, offline=True)
            page = context.new_page()
            page.on("request", lambda r: requested.append(r.url))
            page.goto(page_path.as_uri())
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            charts = page.locator("svg[data-chart]:not(.spark)")
            assert charts.count() == 2  # prompt lengths and splits; each run has a table line
            for i in range(charts.count()):
                box = charts.nth(i).bounding_box()
                assert box and box["width"] > 100 and box["height"] > 50
            lines = page.locator("table.runs tbody tr")
            assert lines.count() == len(expected["states"])
            assert lines.first.get_attribute("data-run") == "run000-copy"  # problems first
            shown = "rows => rows.map(r => r.dataset.run)"
            page.locator("table.runs th", has_text="run").first.click()  # sorts by name
            assert page.eval_on_selector_all("table.runs tbody tr", shown) == sorted(
                expected["states"]
            )
            page.locator("table.runs th", has_text="states").click()
            ordered = page.eval_on_selector_all("table.runs tbody tr", shown)
            counts = [expected["states"][run] for run in ordered]
            assert counts == sorted(counts)
            states = marks(page, 'svg[data-chart="states"]')
            assert {m["x"]: int(float(m["y"])) for m in states} == expected["states"]
            assert all(m["h"] > 0 for m in states)
            splits = marks(page, 'svg[data-chart="splits"]')
            assert {m["x"]: int(float(m["y"])) for m in splits} == expected["splits"]
            lengths = marks(page, 'svg[data-chart="prompt_chars"]')
            assert sum(int(m["y"]) for m in lengths) == len(expected["prompt_chars"])
            assert int(lengths[0]["from"]) == expected["prompt_chars"][0]
            assert int(lengths[-1]["to"]) >= expected["prompt_chars"][-1]
            for value in expected["prompt_chars"]:
                hits = [m for m in lengths if int(m["from"]) <= value <= int(m["to"])]
                assert len(hits) == 1 and int(hits[0]["y"]) > 0
            for run in expected["states"]:
                page.goto((page_path.parent / "runs" / f"{run}.html").as_uri())
                charts = page.locator("svg[data-chart]")
                assert charts.count() == 3
                for i in range(charts.count()):
                    box = charts.nth(i).bounding_box()
                    assert box and box["width"] > 100 and box["height"] > 50
                accuracy = marks(page, f'svg[data-chart="accuracy"][data-run="{run}"]')
                assert {int(m["x"]): float(m["y"]) for m in accuracy} == expected["accuracy"][run]
                assert all(m["w"] > 0 for m in accuracy)
                cards = marks(page, f'svg[data-chart="cards"][data-run="{run}"]')
                assert {int(m["x"]): int(float(m["y"])) for m in cards} == expected["cards"][run]
                ops: dict[int, dict[str, int]] = {}
                for m in marks(page, f'svg[data-chart="ops"][data-run="{run}"]'):
                    ops.setdefault(int(m["x"]), {})[m["kind"]] = int(m["y"])
                    assert m["h"] >= 0 and (m["h"] > 0) == (int(m["y"]) > 0)
                assert ops == expected["ops"][run]
            page.goto((page_path.parent / "runs" / "run001.html").as_uri())
            run001 = page.locator('section[data-run="run001"]')
            assert "1 reject;" in run001.inner_text()
            assert "skills_v1.bak" in run001.locator("ul.ignored").text_content()
            assert "episodes.jsonl" in run001.locator("ul.rejects").text_content()
        finally:
            browser.close()
    runs = page_path.parent / "runs"
    run_pages = [(runs / f"{run}.html").as_uri() for run in expected["states"]]
    # the pages alone: nothing else is fetched
    assert requested == [page_path.as_uri(), *run_pages, (runs / "run001.html").as_uri()]


def test_training_dataset_fails_when_its_fractions_leave_train_without_a_run(synced, tmp_path):
    runs = sorted(p.name for p in synced.runs.iterdir())
    fraction = next(
        f / 100
        for f in range(1, 100)
        if all(split_of(r, ExportOptions(val_fraction=f / 100)) == "val" for r in runs)
    )
    exports = synced.store / "exports"
    before = {p: p.stat().st_mtime_ns for p in exports.rglob("*") if p.is_file()}
    (tmp_path / "home").mkdir()
    with pytest.MonkeyPatch.context() as env, instance_for_test(temp_dir=str(tmp_path)) as i:
        env.setenv("STATEPOOL_RUNS_DIR", str(synced.runs))
        env.setenv("STATEPOOL_STORE_DIR", str(synced.store))
        env.setenv("STATEPOOL_EXPORT_VAL_FRACTION", str(fraction))
        result = (
            defs()
            .resolve_implicit_global_asset_job_def()
            .execute_in_process(
                instance=i, asset_selection=[AssetKey("training_dataset")], raise_on_error=False
            )
        )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "no run fell in train" in str(failure.step_failure_data.error.message)
    assert {p: p.stat().st_mtime_ns for p in exports.rglob("*") if p.is_file()} == before


def test_report_figures_from_the_index_facts_equal_those_from_the_rows(synced):
    from statepool_dagster.core.names import PROMPTS
    from statepool_dagster.core.report.numbers import (
        RunNumbers,
        _counted_by_facts,
        _counted_by_rows,
        prompt_chars,
    )

    layout = StoreLayout(synced.store)
    for run in ("run000", "run001", "run002", "run000-copy"):
        by_facts, by_rows = RunNumbers(run), RunNumbers(run)
        assert _counted_by_facts(layout, run, by_facts)
        _counted_by_rows(layout, run, by_rows)
        assert by_facts == by_rows and by_facts.states == 4
        chars = read_run_table(layout, PROMPTS, run, ["prompt_chars"])["prompt_chars"]
        assert prompt_chars(layout, run) == chars.to_pylist()
