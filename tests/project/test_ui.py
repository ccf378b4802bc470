"""The Dagster UI in a real browser: Debian's Chromium, driven headless by Playwright.

A synced temp instance is served by ``dagster-webserver`` (with ``dagster-daemon`` beside it,
so a run launched from the UI leaves the queue). The test then checks what a user sees: the
asset graph, the ``runs`` partitions, a one-partition materialization launched from the UI's
own Materialize button, and the state-table preview in that partition's metadata; and every
asset check evaluated by the sync on every partition.

Screenshots of every step land in the test's tmp_path (the docs' pictures are taken by
``tools/screenshots.py`` from a fresh demo: ``make screenshots``).
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from contextlib import suppress
from pathlib import Path

import pytest

from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

from browser_helpers import CHROMIUM, CHROMIUM_ARGS, require
from cli_helpers import cli_env
from process_helpers import BIN, REPO, daemon, free_port, process_group

pytestmark = pytest.mark.slow  # a webserver, a daemon and a browser

SPEC = SampleSpec(n_runs=2, n_checkpoints=3, n_cards=4, emb_dim=4, episodes_per_batch=3)
ASSETS = ("run_episodes", "skill_snapshots", "checkpoint_states", "curator_prompts")
CHECKS = {"checkpoint_states": ("inputs_clean",), "curator_prompts": ("states_complete",)}
VIEWPORT = {"width": 1400, "height": 900}
# The UI's "Join the Dagster community" dialog (shown on localhost) reads this key.
NO_NUX = "window.localStorage.setItem('communityNux', JSON.stringify('1'))"
TIMEOUT_MS = 30_000


def wait_until_serving(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"dagster-webserver exited:\n{tail(log)}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"dagster-webserver did not answer {url} in {timeout}s:\n{tail(log)}")


def tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.is_file() else ""


@pytest.fixture
def synced(workspace, tmp_path):
    """Sample runs synced into a temp instance; the environment to serve it with."""
    generate_runs(workspace.runs, SPEC)
    env = cli_env(workspace, tmp_path / "home")
    # The runs sensor is on by default; its first tick finds nothing new, and no second one
    # comes during the test.
    env["STATEPOOL_SENSOR_INTERVAL"] = "300"
    done = subprocess.run(
        [str(BIN / "statepool"), "sync", "--quiet"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return env


def test_ui_shows_assets_partitions_launches_and_metadata(synced, tmp_path):
    require(CHROMIUM.is_file(), f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        require(False, "the playwright package is not installed (pip install -e '.[dev]')")

    expect.set_options(timeout=TIMEOUT_MS)  # its own default is 5 s, whatever the context's
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    workspace_yaml = str(REPO / "workspace.yaml")
    web_log, daemon_log = tmp_path / "webserver.log", tmp_path / "daemon.log"
    web_args = [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)]
    shots: dict[str, Path] = {}

    with (
        process_group([*web_args, "-w", workspace_yaml], synced, web_log) as web,
        daemon(synced, daemon_log),
    ):
        wait_until_serving(f"{base}/server_info", web, web_log)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                context = browser.new_context(viewport=VIEWPORT)
                context.add_init_script(NO_NUX)
                context.set_default_timeout(TIMEOUT_MS)
                page = context.new_page()

                def shot(name: str) -> None:
                    shots[name] = tmp_path / f"{len(shots):02d}-{name}.png"
                    page.screenshot(path=str(shots[name]))

                try:
                    # 1. The asset graph: the four assets are nodes of the lineage graph.
                    page.goto(f"{base}/asset-groups")
                    graph = page.locator("svg foreignObject")
                    for name in ASSETS:
                        expect(graph.get_by_text(name, exact=True)).to_be_visible()
                    # Live status arrives after the graph: one "run_success" icon per asset
                    # in the sidebar once all four are materialized (the sync did that).
                    success = page.get_by_role("img", name="run_success")
                    expect(success.nth(len(ASSETS) - 1)).to_be_visible()
                    shot("asset-graph")

                    # 1b. Every asset check was evaluated by the sync, on every run partition.
                    for asset, names in CHECKS.items():
                        page.goto(f"{base}/assets/{asset}?view=checks")
                        listed = page.get_by_text(f"Checks ({len(names)})", exact=True)
                        expect(listed).to_be_visible(timeout=TIMEOUT_MS)
                        statuses = page.get_by_text(re.compile(r"^(Succeeded|Not evaluated)$"))
                        expect(statuses).to_have_count(len(names), timeout=TIMEOUT_MS)
                        succeeded = page.get_by_text("Succeeded", exact=True)
                        expect(succeeded).to_have_count(len(names), timeout=TIMEOUT_MS)
                    shot("checks")

                    # 2. The runs partitions, listed on an asset's Partitions tab.
                    page.goto(f"{base}/assets/curator_prompts?view=partitions")
                    for run in ("run000", "run001"):
                        expect(page.get_by_text(run, exact=True).first).to_be_visible()
                    expect(page.get_by_text("Materialized (2)")).to_be_visible()
                    shot("partitions")

                    # 3. Materialize one partition from the UI's own button and dialog.
                    page.goto(f"{base}/assets/checkpoint_states?view=partitions")
                    page.get_by_role("button", name=re.compile(r"Materialize")).click()
                    dialog = page.get_by_role("dialog")
                    expect(dialog.get_by_text("Launch runs to materialize")).to_be_visible()
                    dialog.get_by_text("Select a partition or create one").click()
                    page.get_by_role("menuitem").filter(has_text="run001").click()
                    page.keyboard.press("Escape")  # closes the partition menu, not the dialog
                    expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible()
                    shot("launch-dialog")
                    dialog.get_by_role("button", name="Launch 1 run").click()
                    toast = page.get_by_text(re.compile(r"Launched run [0-9a-f]{8}"))
                    expect(toast).to_be_visible()
                    short_id = re.search(r"[0-9a-f]{8}", toast.inner_text()).group(0)
                    shot("launched")

                    # The run appears in the runs list and succeeds (the daemon dequeues it).
                    page.goto(f"{base}/runs")
                    page.get_by_role("link", name=short_id).first.click()
                    expect(page).to_have_url(re.compile(rf"/runs/{short_id}"))
                    expect(page.get_by_text("partition: run001")).to_be_visible()
                    outcome = page.get_by_text(re.compile(r"^(Success|Failure|Canceled)$"))
                    expect(outcome.first).to_be_visible(timeout=120_000)
                    shot("run")
                    assert outcome.first.inner_text() == "Success", tail(daemon_log)

                    # 4. The partition's metadata: the state-table preview of that new run.
                    page.goto(f"{base}/assets/checkpoint_states?view=partitions&partition=run001")
                    expect(page.get_by_role("link", name=short_id)).to_be_visible()
                    expect(page.get_by_text("View all historical events (2)")).to_be_visible()
                    expect(page.get_by_text("preview", exact=True)).to_be_visible()
                    for k in range(SPEC.n_checkpoints):
                        expect(page.get_by_text(f"run001_ckpt{k}", exact=True)).to_be_visible()
                    shot("partition-metadata")
                except Exception:
                    with suppress(Exception):
                        shot("failure")
                    print(f"webserver log:\n{tail(web_log)}\n\ndaemon log:\n{tail(daemon_log)}")
                    raise
            finally:
                browser.close()
