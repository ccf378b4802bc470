"""How long a state's page of the report takes to open in a browser (issue 39).

    python bench/state_page_open.py --store bench/out/live/100k/store [--pages 5]

Builds the pool report of ``--store`` (``statepool report``), then opens the search page,
finds a state by its id there, and opens its page in headless Chromium (Debian's
``/usr/bin/chromium`` through Playwright, as the UI tests drive it); prints each page's
time to its ``load`` event and its size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--pages", type=int, default=5)
    args = parser.parse_args()
    statepool = Path(sys.executable).with_name("statepool")
    started = time.perf_counter()
    subprocess.run([str(statepool), "report", "--store", str(args.store)], check=True)
    built = time.perf_counter() - started
    states = args.store / "report" / "states"
    shards = sorted(p for p in states.glob("*.html") if p.name != "index.html")
    from playwright.sync_api import sync_playwright

    opened = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        page = browser.new_page()
        step = max(1, len(shards) // args.pages)
        for shard in shards[::step][: args.pages]:
            started = time.perf_counter()
            page.goto(shard.resolve().as_uri(), wait_until="load")
            opened.append({"page": shard.name, "kb": shard.stat().st_size // 1024,
                           "load_s": round(time.perf_counter() - started, 3)})  # fmt: skip
        browser.close()
    print(json.dumps({"report_s": round(built, 1), "shards": len(shards), "opened": opened}))


if __name__ == "__main__":
    main()
