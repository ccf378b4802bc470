"""The browser the UI and report tests drive: Debian's Chromium, headless, through Playwright."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require(ok: bool, reason: str) -> None:
    """Skip without the browser locally; in CI (CI=true) a missing browser is a failure."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the browser test must run)")
    pytest.skip(reason)
