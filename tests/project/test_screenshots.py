"""The docs' pictures: every one is taken by ``tools/screenshots.py``, which takes them all."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tools.screenshots import CHROMIUM, PARTITION_VIEWPORT, PICTURES, REPORT_VIEWPORT, UI_VIEWPORT

from process_helpers import REPO, unavailable

IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def test_every_picture_in_the_docs_is_one_the_script_takes():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    shown = {Path(m).name for page in pages for m in IMAGE.findall(page.read_text("utf-8"))}
    assert shown == set(PICTURES)
    assert {p.name for p in (REPO / "docs").rglob("*.png")} == set(PICTURES)


@pytest.mark.slow
def test_the_script_takes_every_picture_from_a_fresh_demo(tmp_path):
    if not CHROMIUM.is_file():
        unavailable(f"{CHROMIUM} not found (apt-get install chromium)", "Chromium")
    done = subprocess.run(
        [sys.executable, "-m", "tools.screenshots", "--docs", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == [str(tmp_path / name) for name in PICTURES]
    sizes = [_png_size(tmp_path / name) for name in PICTURES]
    viewports = (UI_VIEWPORT, PARTITION_VIEWPORT, REPORT_VIEWPORT)
    assert sizes == [(v["width"], v["height"]) for v in viewports]
