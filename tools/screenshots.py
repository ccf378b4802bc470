"""Regenerate every screenshot in the docs from a fresh ``statepool demo`` and the Dagster UI.

``python -m tools.screenshots`` (from the repository's root, the venv's Python; ``--keep DIR``
leaves the demo folder there). In a temporary folder, with an instance home of its own:
``statepool demo --sessions``, a few answers graded offline and imported as feedback
(``statepool score``, ``statepool feedback``), ``state_stats_job`` and then
``training_dataset`` launched with ``dg launch`` as the feedback sensor and the automation
would, and ``statepool report`` again, so all eight assets are materialized and up to date
and the report has every section. Then ``dagster-webserver`` on 127.0.0.1 and
Playwright driving the system's Chromium (``/usr/bin/chromium``; Playwright never downloads
a browser) write:

- ``docs/ui-asset-graph.png``: the global asset lineage, every asset of the definitions;
- ``docs/ui-partition-metadata.png``: run ``demo_run000`` of ``checkpoint_states``, its
  metadata and state-table preview;
- ``docs/report.png``: the top of the pool report, ``store/report/index.html``.

What each picture must show is checked before it is written (the assets on the graph and
their success marks, the partition's preview rows, the report's sections), so a UI or report
that changed fails here instead of leaving a picture that no longer tells the truth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
]
UI_VIEWPORT = {"width": 1400, "height": 900}
PARTITION_VIEWPORT = {"width": 1400, "height": 1100}  # down to the preview's last row
REPORT_VIEWPORT = {"width": 1150, "height": 1300}  # the runs table's every column
# The UI's "Join the Dagster community" dialog (shown on localhost) reads this key.
NO_NUX = "window.localStorage.setItem('communityNux', JSON.stringify('1'))"
TIMEOUT_MS = 60_000
RUN = "demo_run000"
GRAPH, PARTITION, REPORT = "ui-asset-graph.png", "ui-partition-metadata.png", "report.png"
PICTURES = (GRAPH, PARTITION, REPORT)  # every picture under docs/


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(root / "home"),
        STATEPOOL_RUNS_DIR=str(root / "runs"),
        STATEPOOL_STORE_DIR=str(root / "store"),
        STATEPOOL_SESSIONS_DIR=str(root / "sessions"),
        STATEPOOL_SENSOR_INTERVAL="3600",
    )
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path, out: Path | None = None) -> None:
    print("+", " ".join(args), file=sys.stderr, flush=True)
    with open(out, "wb") if out else open(os.devnull, "wb") as stdout:
        done = subprocess.run(args, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE)
    if done.returncode != 0:
        sys.exit(f"{args[0]} exited {done.returncode}:\n{done.stderr.decode()[-4000:]}")


def _answers(store: Path, path: Path) -> None:
    """Answers to three exported states (the first state's two alike), as docs/feedback.md."""
    import pyarrow.parquet as pq

    rows = pq.read_table(store / "exports" / "verl" / "train.parquet").to_pylist()[:3]
    with open(path, "w", encoding="utf-8") as out:
        for n, row in enumerate(rows):
            truth = row["reward_model"]["ground_truth"]
            for answer in ["[]", "[]"] if n == 0 else [truth, "[]", "no idea"]:
                line = {"state_id": row["extra_info"]["state_id"], "completion": answer}
                out.write(json.dumps(line) + "\n")


def build_demo(root: Path) -> dict[str, str]:
    """A fresh demo with sessions and folded feedback under ``root``; its environment."""
    env = _env(root)
    (root / "home").mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", root / "home" / "dagster.yaml")
    statepool = str(BIN / "statepool")
    _run([statepool, "demo", "--sessions", "--quiet"], env, root)
    _answers(root / "store", root / "answers.jsonl")
    score = [statepool, "score", "--completions", "answers.jsonl", "--json"]
    _run(score, env, root, out=root / "scores.json")
    _run([statepool, "feedback", "--from-scores", "scores.json"], env, root)
    dg = str(BIN / "dg")
    _run([dg, "launch", "--job", "state_stats_job"], env, REPO)
    _run([dg, "launch", "--assets", "training_dataset"], env, REPO)  # as its automation would
    # The report names its store as given: ./store, as after `make demo`.
    _run([statepool, "report"], {**env, "STATEPOOL_STORE_DIR": "./store"}, root)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_serving(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"dagster-webserver exited:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"dagster-webserver did not answer {url} in {timeout}s")


def _retry(step) -> None:
    """``step`` again once after a first failure: a loaded machine can outlast a timeout."""
    from playwright.sync_api import Error

    try:
        step()
    except (AssertionError, Error) as exc:
        print(f"retrying after: {str(exc).splitlines()[0]}", file=sys.stderr)
        step()


def _asset_names() -> list[str]:
    from statepool_dagster.definitions import defs

    return sorted(key.path[-1] for key in defs().resolve_asset_graph().get_all_asset_keys())


def shoot(root: Path, env: dict[str, str], docs: Path) -> list[Path]:
    """The three pictures, each checked, written into ``docs``."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)  # its own default is 5 s, whatever the context's
    assets = _asset_names()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = root / "webserver.log"
    web = [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)]
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [*web, "-w", str(REPO / "workspace.yaml")],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    written = []
    try:
        _wait_serving(f"{base}/server_info", server, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                context = browser.new_context(viewport=UI_VIEWPORT)
                context.add_init_script(NO_NUX)
                context.set_default_timeout(TIMEOUT_MS)
                page = context.new_page()

                def graph() -> None:
                    page.goto(f"{base}/asset-groups")
                    nodes = page.locator("svg foreignObject")
                    for name in assets:
                        expect(nodes.get_by_text(name, exact=True)).to_be_visible()
                    success = page.get_by_role("img", name="run_success")
                    expect(success).to_have_count(len(assets))  # every asset materialized
                    page.wait_for_timeout(1000)  # the graph's zoom-to-fit settles

                _retry(graph)
                written.append(docs / GRAPH)
                page.screenshot(path=str(written[-1]))

                def partition() -> None:
                    page.set_viewport_size(PARTITION_VIEWPORT)
                    page.goto(f"{base}/assets/checkpoint_states?view=partitions&partition={RUN}")
                    expect(page.get_by_text("preview", exact=True)).to_be_visible()
                    for k in range(2):
                        row = page.get_by_text(f"{RUN}_ckpt{k}", exact=True)
                        expect(row).to_be_in_viewport()

                _retry(partition)
                written.append(docs / PARTITION)
                page.screenshot(path=str(written[-1]))

                report = browser.new_page(viewport=REPORT_VIEWPORT)
                report.goto((root / "store" / "report" / "index.html").as_uri())
                for heading in ("Sessions", "Feedback"):
                    expect(report.get_by_role("heading", name=heading).first).to_be_attached()
                written.append(docs / REPORT)
                report.screenshot(path=str(written[-1]))
            finally:
                browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build the demo in this (new) folder and keep it")
    parser.add_argument("--docs", type=Path, default=DOCS, help="where to write the pictures")
    args = parser.parse_args(argv)
    if not CHROMIUM.is_file():
        sys.exit(f"{CHROMIUM} not found: apt-get install chromium (never a Playwright download)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="statepool-screenshots-"))
    try:
        env = build_demo(root)
        for path in shoot(root, env, args.docs):
            print(path)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
