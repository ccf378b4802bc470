"""Dagster's own event-log contract suite, taken from the installed releases' source distributions.

Dagster tests every event log storage with ``TestEventLogStorage``
(``dagster_tests/storage_tests/utils/event_log_storage.py``) and dagster-postgres its own with
``TestPostgresEventLogStorage`` (``dagster_postgres_tests/test_event_log.py``). Neither is in
the wheels and neither is committed here: :func:`fetch` (``make contract-suite``, or
``python tests/storages/dagster_suite.py``) has pip download the source releases of the installed
``dagster`` and ``dagster-postgres`` and extracts only those files into ``.dagster_suite/``
(git-ignored); the tests load them from there, never from the network.

Adapted, no test body changed: the package ``__init__`` of ``storage_tests/utils`` also imports
``run_storage``, which needs Dagster's unpublished ``dagster_test`` package (that import is
dropped); the PostgreSQL file calls ``ensure_dagster_tests_import()``, which asserts Dagster's
repository layout (a no-op while the file loads: ``dagster_tests`` is on the path). The rest
(fixtures, the class under test) is in ``tests/storages/test_contract_*.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".dagster_suite"

# Per source release: the files the suite needs, as named inside the archive's top folder.
DAGSTER_FILES = (
    "dagster_tests/__init__.py",
    "dagster_tests/storage_tests/__init__.py",
    "dagster_tests/storage_tests/utils/__init__.py",
    "dagster_tests/storage_tests/utils/event_log_storage.py",
    "dagster_tests/storage_tests/test_event_log.py",
)
POSTGRES_FILES = (
    "dagster_postgres_tests/__init__.py",
    "dagster_postgres_tests/test_event_log.py",
)
UTILS_INIT = "dagster_tests/storage_tests/utils/__init__.py"
RUN_STORAGE_LINES = (
    'pytest.register_assert_rewrite("dagster_tests.storage_tests.utils.run_storage")',
    "from dagster_tests.storage_tests.utils import run_storage as run_storage  # ruff: isort:skip",
)


class SuiteUnavailable(Exception):
    """The suite is not on this machine (or cannot be loaded): why, and what to run."""


def releases() -> dict[str, str]:
    """The installed releases whose source the suite comes from: ``{project: version}``."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"dagster": version("dagster")}
    with contextlib.suppress(PackageNotFoundError):
        found["dagster-postgres"] = version("dagster-postgres")
    return found


def suite_dir() -> Path:
    """Where this set of releases' suite is (or goes): one folder per release set."""
    return CACHE / "+".join(f"{name}-{v}" for name, v in sorted(releases().items()))


def fetch() -> Path:
    """Download the source releases, extract the suite's files; the folder. Idempotent."""
    target = suite_dir()
    if target.is_dir():
        return target
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        work = Path(tmp)
        for name, version in releases().items():
            archive = _download(name, version, work / "sdist")
            files = DAGSTER_FILES if name == "dagster" else POSTGRES_FILES
            _extract(archive, files, work / "suite")
        _drop_run_storage(work / "suite" / UTILS_INIT)
        try:
            os.replace(work / "suite", target)
        except OSError:  # another process got there first
            if not target.is_dir():
                raise
    return target


def _download(name: str, version: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", f"{name}=={version}"]
    command += ["--no-binary", ":all:", "--no-deps", "--quiet", "--dest", str(into)]
    done = subprocess.run(command, capture_output=True, text=True)
    archives = sorted(into.glob(f"{name.replace('-', '_')}-{version}.tar.gz"))
    archives += sorted(into.glob(f"{name}-{version}.tar.gz"))
    if done.returncode != 0 or not archives:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SuiteUnavailable(
            f"`pip download {name}=={version} --no-binary :all:` failed: {' / '.join(tail)}"
        )
    return archives[0]


def _extract(archive: Path, files: tuple[str, ...], into: Path) -> None:
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        for name in files:
            member = tar.extractfile(f"{top}/{name}")
            if member is None:
                raise SuiteUnavailable(f"{archive.name} has no {name}")
            path = into / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(member.read())


def _drop_run_storage(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() not in RUN_STORAGE_LINES]
    if len(lines) - len(kept) != len(RUN_STORAGE_LINES):
        raise SuiteUnavailable(f"{path.name} is not the file this adaptation expects")
    path.write_text("".join(kept), encoding="utf-8")


def _on_path() -> Path:
    folder = suite_dir()
    if not folder.is_dir():
        failed = CACHE / "fetch-failed.txt"
        last = (
            f"; the last try: {failed.read_text(encoding='utf-8').strip()}"
            if failed.exists()
            else ""
        )
        raise SuiteUnavailable(
            f"Dagster's contract suite is not fetched ({folder} is missing): "
            "run `make contract-suite` (pip downloads the source releases of "
            + ", ".join(f"{n}=={v}" for n, v in releases().items())
            + f"){last}"
        )
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder


def event_log_suite() -> ModuleType:
    """``dagster_tests.storage_tests.utils.event_log_storage`` (``TestEventLogStorage``)."""
    _on_path()
    return importlib.import_module("dagster_tests.storage_tests.utils.event_log_storage")


def sqlite_suite() -> ModuleType:
    """``dagster_tests.storage_tests.test_event_log`` (``TestSqliteEventLogStorage``: the
    suite with Dagster's SQLite fixtures and SQLite's own tests)."""
    event_log_suite()
    pytest.register_assert_rewrite("dagster_tests.storage_tests.test_event_log")
    return importlib.import_module("dagster_tests.storage_tests.test_event_log")


def postgres_suite() -> ModuleType:
    """``dagster_postgres_tests.test_event_log`` (``TestPostgresEventLogStorage``)."""
    _on_path()
    event_log_suite()
    if "dagster-postgres" not in releases():
        raise SuiteUnavailable("dagster-postgres is not installed: pip install -e '.[postgres]'")
    try:
        import objgraph  # noqa: F401  (the file imports it)
    except ImportError as error:
        raise SuiteUnavailable(f"{error}: pip install -e '.[dev]'") from error
    pytest.register_assert_rewrite("dagster_postgres_tests")
    with mock.patch("dagster._core.test_utils.ensure_dagster_tests_import", lambda: None):
        return importlib.import_module("dagster_postgres_tests.test_event_log")


if __name__ == "__main__":
    failed = CACHE / "fetch-failed.txt"
    try:
        print(fetch())
        failed.unlink(missing_ok=True)
    except SuiteUnavailable as error:
        failed.write_text(f"{error}\n", encoding="utf-8")
        sys.exit(f"dagster_suite: {error}")
