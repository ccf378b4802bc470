"""Fixtures for the core tests: real run folders, the original script, a fake ``infer`` package.

Everything here is independent of ``tests/conftest.py`` (the Dagster layer's), so the two
can evolve separately.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_PATH = REPO_ROOT.parent / "shared" / "reference" / "statepool_seed.py"
DEFAULTS_DIR = REPO_ROOT / "statepool_dagster" / "core" / "prompts" / "defaults"


@pytest.fixture(autouse=True)
def _clean_statepool_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No STATEPOOL_* setting leaks in from the shell running the tests."""
    for name in list(os.environ):
        if name.startswith("STATEPOOL_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def seed_module() -> ModuleType:
    """The original script, loaded from ``<repo>/../shared/reference`` (never copied)."""
    if not SEED_PATH.is_file():
        pytest.skip(f"original script not found at {SEED_PATH} (shared/ must sit beside the repo)")
    name = "statepool_seed_for_core_tests"
    spec = importlib.util.spec_from_file_location(name, SEED_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _drop_infer_modules() -> None:
    for name in [m for m in sys.modules if m == "infer" or m.startswith("infer.")]:
        del sys.modules[name]


def bundled_template() -> str:
    return (DEFAULTS_DIR / "curator_prompt.txt").read_text(encoding="utf-8")


def bundled_param_rule() -> str:
    return (DEFAULTS_DIR / "param_rule.txt").read_text(encoding="utf-8")


def bundled_tool_specs() -> dict[str, Any]:
    return json.loads((DEFAULTS_DIR / "tool_specs.json").read_text(encoding="utf-8"))


@pytest.fixture
def fake_infer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """Install a fake inference-side ``infer`` package on ``sys.path``.

    Call it with the template, rule, tool specs and an optional formatter wrapper prefix;
    by default its modules hold the bundled defaults as literals.
    """
    _drop_infer_modules()

    def install(
        template: str | None = None,
        param_rule: str | None = None,
        tool_specs: dict[str, Any] | None = None,
        formatter_prefix: str | None = None,
    ) -> Path:
        template = bundled_template() if template is None else template
        param_rule = bundled_param_rule() if param_rule is None else param_rule
        tool_specs = bundled_tool_specs() if tool_specs is None else tool_specs
        root = tmp_path / "fake_inference_side"
        curator = root / "infer" / "curator"
        curator.mkdir(parents=True)
        (root / "infer" / "__init__.py").write_text("", encoding="utf-8")
        (curator / "__init__.py").write_text("", encoding="utf-8")
        (curator / "curator.py").write_text(
            f"CURATOR_PROMPT = {template!r}\nPARAM_RULE_ON = {param_rule!r}\n", encoding="utf-8"
        )
        if formatter_prefix is None:
            reflector = "from statepool_dagster.core.prompts.template import format_episodes\n"
        else:
            reflector = (
                "from statepool_dagster.core.prompts.template import format_episodes as _base\n\n\n"
                "def format_episodes(episodes):\n"
                f"    return {formatter_prefix!r} + _base(episodes)\n"
            )
        (curator / "reflector.py").write_text(reflector, encoding="utf-8")
        (root / "infer" / "tools.py").write_text(f"TOOL_SPECS = {tool_specs!r}\n", encoding="utf-8")
        monkeypatch.syspath_prepend(str(root))
        return root

    yield install
    _drop_infer_modules()


@pytest.fixture
def write_run() -> Callable[..., Path]:
    """Write a run folder: ``episodes`` (dicts, or str/bytes lines) and ``snapshots``.

    ``snapshots`` maps a file name under ``snapshots/`` to a dict (written as JSON) or bytes.
    """

    def write(
        root: Path,
        name: str,
        episodes: list[Any] | bytes | None = None,
        snapshots: dict[str, Any] | None = None,
    ) -> Path:
        run = root / name
        (run / "snapshots").mkdir(parents=True, exist_ok=True)
        if isinstance(episodes, bytes):
            (run / "episodes.jsonl").write_bytes(episodes)
        elif episodes is not None:
            lines = []
            for e in episodes:
                if isinstance(e, bytes):
                    lines.append(e)
                elif isinstance(e, str):
                    lines.append(e.encode("utf-8"))
                else:
                    lines.append(json.dumps(e, ensure_ascii=False).encode("utf-8"))
            (run / "episodes.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
        for file_name, content in (snapshots or {}).items():
            data = (
                content
                if isinstance(content, bytes)
                else json.dumps(content, ensure_ascii=False).encode("utf-8")
            )
            (run / "snapshots" / file_name).write_bytes(data)
        return run

    return write
