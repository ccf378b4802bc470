"""The benchmark runs end to end at a tiny size, so it cannot rot; its larger shapes are sound."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from process_helpers import REPO

BENCH = REPO / "bench"


def run_bench(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(BENCH / "run_bench.py"), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # the benchmark: many processes
def test_benchmark_runs_at_tiny_size_and_reports_every_figure(tmp_path):
    doc = tmp_path / "docs" / "tiny.md"
    done = run_bench("--size", "tiny", "--out", str(tmp_path), "--doc-file", str(doc))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "tiny" / "results.json").read_text())
    names = {m["name"] for m in results["measures"]}
    assert {
        "core alone (no Dagster)",
        "statepool sync (fresh)",
        "statepool sync, nothing changed",
        "statepool sync, one run grown by one checkpoint",
        "statepool status",
        "statepool export --format verl",
        "statepool export --format trl",
        "statepool export --format pool",
        "statepool report",
        "training_dataset (materialized in process)",
    } <= names
    assert all(m["seconds"] > 0 and m["peak_rss_mb"] > 0 for m in results["measures"])
    assert results["states"] == results["expected_states"] == 12
    assert results["sensor"]["unchanged_requests"] == 0
    assert results["sensor"]["new_requests"] == results["sensor"]["new"]
    assert "sqlite" in results["dagster_share_ms"]
    # The page the docs include is the table printed, under a header naming what was run.
    page = doc.read_text()
    assert page == done.stdout
    assert "| `statepool sync` from scratch |" in page
    assert "| `statepool export --format verl` |" in page
    assert "Dagster's share per partition" in page
    assert "--size tiny" in page and results["run"]["code"] == str(REPO)

    incremental = {m["name"] for m in results["incremental"]["measures"]}
    assert {"sync: +1 run on N synced", "sync: extra run grew 1 ckpt"} <= incremental
    assert results["core_grow"]["full_s"] > 0 and results["core_grow"]["grown_s"] > 0
    assert results["rss_half_runs_mb"] > 0 and results["noop_step_s"] > 0
    assert "the same for the core alone" in page
    assert results["dagster_floor"]["seconds"] > 0 and results["dagster_floor_step_s"] > 0
    assert results["sync_floor"]["seconds"] > 0 and results["core_imports"]["seconds"] > 0
    long_short = results["long_short"]
    assert long_short["dagster_one_partition_step_s"] > 0
    for label in ("long", "short"):
        figures = long_short[label]
        assert figures["scratch_rss_mb"] > 0 and figures["scratch_step_s"] > 0
        assert figures["idle_s"] > 0 and figures["grown_s"] > 0
        assert len(figures["grown_steps_s"]) == 3 and figures["grown_step_s"] > 0
    assert long_short["long"]["checkpoints"] > long_short["short"]["checkpoints"]
    assert long_short["grown_step_long_vs_short"] > 0
    assert "| long |" in page and "| short |" in page
    # Each speed target beside its floor, all from this run (they are ratios to the original).
    if not (REPO.parent / "shared" / "reference" / "statepool_seed.py").is_file():
        pytest.skip("original script not found: no targets to set floors beside")
    floors = {row["target"]: row for row in results["floors"]}
    assert len(floors) == 4
    core = floors["core alone ≥ 15× the original"]
    assert core["floor_s"] == results["core_imports"]["seconds"]
    original = next(m for m in results["measures"] if m["name"] == "original script")
    assert core["allowed_s"] == pytest.approx(original["seconds"] / 15)
    assert all(row["floor_s"] > 0 for row in floors.values())
    # A difference of two timings ("sync − the floor") can come out at or below zero on a
    # busy machine: the test asks only that each was measured, not what it came to.
    assert all(isinstance(row["measured_s"], float) for row in floors.values())
    assert "| target | allowed s | measured s | floor s |" in page


def test_only_generate_writes_the_corpus_and_measures_nothing(tmp_path):
    done = run_bench("--size", "tiny", "--out", str(tmp_path), "--only-generate", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["expected_states"] == 12 and summary["spec"]["n_runs"] == 3
    assert sorted(p.name for p in (tmp_path / "tiny" / "runs").iterdir()) == [
        "run000",
        "run001",
        "run002",
    ]
    assert not (tmp_path / "tiny" / "sync_home").exists()


def test_wide_and_huge_shapes_are_the_issues(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        from shapes import expected_states, generate_corpus, run_name, spec_of
    finally:
        sys.path.remove(str(BENCH))
    wide, huge = spec_of("wide"), spec_of("huge")
    assert (wide.n_runs, wide.n_checkpoints, wide.n_cards, wide.emb_dim) == (200, 20, 30, 64)
    assert wide.episodes_per_batch == 8 and expected_states(wide) == 4_000
    assert expected_states(huge) == 100_000
    assert run_name(huge, huge.n_runs - 1) == "run1999" and run_name(wide, 7) == "run007"
    # One run of huge's shape, generated as the bench would: its checkpoints all there.
    one = type(huge)(**{**huge.__dict__, "n_runs": 1})
    generate_corpus(tmp_path, one)
    snapshots = list((tmp_path / "run000" / "snapshots").glob("skills_v*.json"))
    assert len(snapshots) == huge.n_checkpoints


def test_bench_programs_are_modules_using_public_dagster_only():
    for path in BENCH.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\bdagster\._", text), f"{path.name} imports private Dagster code"
        assert '"-c"' not in text or path.name == "measure.py", f"{path.name} runs a string"
        assert len(text.splitlines()) <= 300, f"{path.name} is over 300 lines"


@pytest.mark.slow  # generates and syncs a corpus, then a serving process and a writer
def test_live_pool_bench_runs_at_tiny_size_and_checks_rows_against_the_export(tmp_path):
    docs = tmp_path / "docs"
    argv = [sys.executable, str(BENCH / "live_pool.py"), "--sizes", "tiny", "--out", str(tmp_path)]
    argv += ["--docs", str(docs), "--probes", "2", "--refreshes", "1", "--name", "tiny"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((tmp_path / "live" / "results-tiny.json").read_text())
    figures = run["sizes"]["tiny"]
    served = figures["local"]
    assert served["states"] == served["rows"] == 12  # 3 runs × 4 checkpoints
    assert served["open_s"] > 0 and served["refresh_new_segment_s"] > 0
    assert 0 < served["rss_anon_open_mb"] <= served["rss_anon_peak_mb"] < served["vm_hwm_mb"]
    check = served["rows_vs_export"]
    assert check["same"] and check["rows_equal"] == check["exported"] == 12
    if served["api"] != "LivePool(store=...)":  # a pool with a sessions folder
        assert served["refresh_grew_by"] == [5]
        assert served["probes_seen"] == served["probes_id_matched"] == 2
        assert 0 < served["fresh_p50_s"] <= served["fresh_p99_s"]
    # The page is written from the figures filed under each name.
    assert json.loads((docs / "live.json").read_text())["tiny"] == run
    page = (docs / "live.md").read_text()
    assert "| states served | 12 |" in page and "same: 12 rows" in page
    assert "--sizes tiny" in page


@pytest.mark.slow  # the benchmark: many processes
def test_cpu_comparison_runs_at_tiny_size_and_reports_every_figure(tmp_path):
    doc = tmp_path / "cpu.md"
    argv = [sys.executable, str(BENCH / "cpu_compare.py"), "--size", "tiny", "--repeat", "1"]
    argv += ["--code", str(REPO), "--out", str(tmp_path), "--doc-file", str(doc)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "cpu-tiny" / "results.json").read_text())
    (figures,) = results["figures"].values()
    assert all(
        cpu > 0 for name, runs in figures.items() for cpu, *_ in runs if "LivePool" not in name
    )
    (share,) = figures[next(n for n in figures if "Dagster's share" in n)]
    assert share[1] == 3  # tiny: three runs, each built by the sync
    (sync,) = figures["statepool sync from scratch"]
    assert sync[2] > 0  # its peak RSS
    assert [states for _, states in figures[next(n for n in figures if "LivePool" in n)]] == [12]
    # The sync after one new checkpoint built its state; the corpus itself did not grow.
    (store,) = (tmp_path / "cpu-tiny").glob("*_store")
    assert len(list((store / "state_pool" / "run000").glob("*.json"))) == 5
    assert len(list((tmp_path / "cpu-tiny" / "runs" / "run000" / "snapshots").iterdir())) == 4
    page = doc.read_text()
    assert page == done.stdout and "| statepool sync from scratch |" in page
    assert "| sync from scratch + export, CPU |" in page and "--size tiny" in page
    assert "| statepool sync after one new checkpoint in one run |" in page
    assert "| peak RSS MB: statepool export --format verl |" in page
    assert "| peak RSS of the sync and the export (the larger) vs the fair peer's |" in page
    # The floor is measured beside them, and it wrote the original's bytes.
    assert "| the floor + every prompt rendered (floor.py --prompts) |" in page
    assert "× the floor + prompts" in page
    # What every sync imports, and the least a sync of the design costs, from the figures
    # of its parts: stock Dagster recording the sync's partitions, pyarrow, the floor.
    (loaded,) = figures[next(n for n in figures if "imports first" in n)]
    assert loaded[0] > 0 and loaded[2] > 0
    (alone,) = figures[next(n for n in figures if n.startswith("Dagster alone"))]
    (parquet,) = figures[next(n for n in figures if n.startswith("import pyarrow.parquet"))]
    floor_row = next(line for line in page.splitlines() if "the least a sync" in line)
    least = float(floor_row.split("|")[2].split(",")[0])
    prompts = figures["the floor + every prompt rendered (floor.py --prompts)"][0][0]
    assert least == pytest.approx(alone[0] + parquet[0] + prompts, abs=0.01)
    assert 0 < parquet[0] < alone[0]
    corpus = tmp_path / "cpu-tiny"
    argv = [sys.executable, str(BENCH / "floor.py"), str(corpus / "runs"), str(tmp_path / "f")]
    argv += ["--check", str(corpus / "seed_pool")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert int(done.stdout) == len(list((corpus / "seed_pool").glob("*.json"))) > 0
