"""Plain helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import NoReturn

import pytest


def seed_pool(seed: ModuleType, runs: Path, out: Path) -> dict[str, dict[str, bytes]]:
    """What the original script writes for each run: ``{run: {file name: bytes}}``."""
    pools: dict[str, dict[str, bytes]] = {}
    for run_dir in sorted(p for p in runs.iterdir() if (p / "episodes.jsonl").is_file()):
        target = out / run_dir.name
        seed.collect_from_run(str(run_dir), str(target))
        pools[run_dir.name] = {p.name: p.read_bytes() for p in target.glob("*.json")}
        shutil.rmtree(target)
    return pools


def store_pool(store: Path) -> dict[str, dict[str, bytes]]:
    """The state-pool files in our store: ``{run: {file name: bytes}}``."""
    root = store / "state_pool"
    if not root.is_dir():
        return {}
    return {
        d.name: {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith(".")}
        for d in root.iterdir()
        if d.is_dir() and not d.name.startswith(".")
    }


REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STATEPOOL = BIN / "statepool"  # the console script; with PYTHONPATH set it runs this checkout


def unavailable(reason: str, needs: str) -> NoReturn:
    """Skip a test that lacks ``needs`` (a server, an extra); under ``CI=true``, fail it."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the tests needing {needs} must run, not skip)")
    pytest.skip(reason)


def cli_env(workspace, home: Path, set_up: bool = True) -> dict[str, str]:
    """Environment for a ``statepool`` subprocess: its own DAGSTER_HOME, runs and store.

    A new ``home`` is set up already, with the project's ``dagster.yaml`` (see ``empty_home``);
    ``set_up=False`` leaves it an empty folder but for ``dagster.yaml``, for the tests of a
    command setting up a new home.
    """
    if set_up and not (home.is_dir() and any(home.iterdir())):
        shutil.copytree(empty_home("cli"), home, dirs_exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        STATEPOOL_RUNS_DIR=str(workspace.runs),
        STATEPOOL_STORE_DIR=str(workspace.store),
    )
    return env


def statepool(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the ``statepool`` command; it must succeed."""
    done = subprocess.run(
        [str(STATEPOOL), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def sync_json(env: dict[str, str], cwd: Path) -> dict:
    """``statepool sync --json``'s report."""
    return json.loads(statepool(env, cwd, "sync", "--json").stdout)


def local_sync(root: Path, spec) -> Path:
    """Sample runs for ``spec`` synced by a plain ``statepool sync`` on the default SQLite home.

    Returns the store. Sample runs are deterministic: it is the reference for other setups.
    """
    import yaml

    from statepool_dagster.demo.sample_runs import generate_runs

    reference = SimpleNamespace(runs=root / "runs", store=root / "store")
    generate_runs(reference.runs, spec)
    env = cli_env(reference, root / "home")
    assert "storage" not in yaml.safe_load((root / "home" / "dagster.yaml").read_text())
    report = sync_json(env, root)
    assert (report["new"], report["failed"]) == (spec.n_runs, 0)
    assert sorted(store_pool(reference.store)) == [f"run{i:03d}" for i in range(spec.n_runs)]
    return reference.store


def instance_config() -> dict:
    """The project's instance config (``dagster.yaml``: its SQLite event log), as ``statepool``
    and the daemon use it."""
    import yaml

    return yaml.safe_load((REPO / "dagster.yaml").read_text())


# Dagster's capture of each step's stdout and stderr (a `tail` and a watcher process per step,
# a tenth of a second), which no test reads: off in the tests' in-process instances.
NO_COMPUTE_LOGS = {
    "module": "dagster._core.storage.noop_compute_log_manager",
    "class": "NoOpComputeLogManager",
}


def in_process_config() -> dict:
    """``instance_config()`` without the capture of the steps' output (``NO_COMPUTE_LOGS``)."""
    return {**instance_config(), "compute_logs": NO_COMPUTE_LOGS}


_EMPTY_HOMES: dict[str, Path] = {}  # this process's empty homes, made on first use


def empty_home(kind: str) -> Path:
    """An instance home Dagster set up once in this process, to copy: ``"test"`` as
    ``instance_for_test`` makes one, ``"cli"`` as ``statepool`` does (the project's
    ``dagster.yaml``). Dagster builds a new home's schema through dozens of migrations, a
    third of a second each time; a copy takes milliseconds and holds the same files.
    """
    if kind not in _EMPTY_HOMES:
        from dagster import DagsterInstance, instance_for_test

        home = Path(tempfile.mkdtemp(prefix=f"statepool-empty-{kind}-home-"))
        atexit.register(shutil.rmtree, home, True)
        if kind == "test":
            opened = instance_for_test(temp_dir=str(home), overrides=in_process_config())
        else:
            shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
            opened = DagsterInstance.from_config(str(home))
        with opened:
            pass
        _EMPTY_HOMES[kind] = home
    return _EMPTY_HOMES[kind]


def new_instance(home: Path):
    """``instance_for_test`` on a new SQLite instance home in ``home`` (a copy of
    ``empty_home("test")``), with the project's ``dagster.yaml`` (``in_process_config``)."""
    from dagster import instance_for_test

    home.mkdir(parents=True, exist_ok=True)
    assert not any(home.iterdir()), f"{home} is not empty: no new instance there"
    shutil.copytree(empty_home("test"), home, dirs_exist_ok=True)
    return instance_for_test(temp_dir=str(home), overrides=in_process_config())


def materialize_run(instance, run: str, raise_on_error: bool = True):
    """Register ``run`` if needed and run ``statepool_job`` for it in ``instance``."""
    from statepool_dagster.definitions import defs
    from statepool_dagster.defs.runs.partitions import RUNS

    if run not in instance.get_dynamic_partitions(RUNS):
        instance.add_dynamic_partitions(RUNS, [run])
    return (
        defs()
        .resolve_job_def("statepool_job")
        .execute_in_process(instance=instance, partition_key=run, raise_on_error=raise_on_error)
    )


def latest_metadata(instance, asset: str, run: str | None = None) -> dict:
    """The metadata values of ``asset``'s latest materialization (of partition ``run``)."""
    from dagster import AssetKey, AssetRecordsFilter

    records = instance.fetch_materializations(
        AssetRecordsFilter(
            asset_key=AssetKey(asset), asset_partitions=None if run is None else [run]
        ),
        limit=1,
    ).records
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def synced_store(root: Path, spec) -> Path:
    """Sample runs for ``spec`` under ``root``, synced in-process into ``root/store``."""
    from statepool_dagster.cli.sync import sync
    from statepool_dagster.demo.sample_runs import generate_runs

    generate_runs(root / "runs", spec)
    with pytest.MonkeyPatch.context() as env, new_instance(root / "home") as i:
        env.setenv("STATEPOOL_RUNS_DIR", str(root / "runs"))
        env.setenv("STATEPOOL_STORE_DIR", str(root / "store"))
        assert not sync(i).failed
    return root / "store"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_group(args: list[str], env: dict[str, str], log: Path, cwd: Path = REPO):
    """Start ``args`` in a session of its own (its children too), output to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_group(proc: subprocess.Popen) -> None:
    """Stop ``proc`` and everything it started (its process group): TERM, then KILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def process_group(args: list[str], env: dict[str, str], log: Path, cwd: Path = REPO):
    """A process in its own session for the ``with`` block; its whole group is ended on exit."""
    proc = start_group(args, env, log, cwd)
    try:
        yield proc
    finally:
        stop_group(proc)


def daemon(env: dict[str, str], log: Path) -> AbstractContextManager[subprocess.Popen]:
    """``dagster-daemon run`` on this checkout's workspace.yaml, as a ``process_group``."""
    return process_group(
        [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")], env, log
    )


def wait_until(
    condition: Callable[[], bool], timeout: float, proc: subprocess.Popen, log: Path
) -> None:
    """Poll ``condition`` each second; fail with the log's tail if ``proc`` exits or time is up."""
    deadline = time.monotonic() + timeout
    while not condition():
        tail = log.read_text(errors="replace")[-4000:]
        assert proc.poll() is None, f"{proc.args[0]} exited:\n{tail}"
        assert time.monotonic() < deadline, f"timed out after {timeout}s:\n{tail}"
        time.sleep(1)


def assert_files_only(argv: list[str]) -> None:
    """``statepool`` with ``argv`` succeeds in a fresh interpreter without importing Dagster."""
    code = (
        "import sys\n"
        "from statepool_dagster.cli.main import main\n"
        f"assert main({argv!r}) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'dagster')\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def generated_state(k: int) -> dict:
    """A small state as the original's ``to_json`` writes it, not from any run: ``gen-<k>``."""
    return {
        "state_id": f"gen-{k}",
        "dataset": "ovo",
        "lib_snapshot": {"version": k, "cards": []},
        "episodes": [{"skill_lib_version": k, "question": f"q{k}"}],
        "analysis": None,
        "last_receipt": "r",
        "followup_qids": [],
        "gt_map": {},
    }


def store_files(root) -> dict[str, bytes]:
    """Every visible file under a store root, local or not: ``{relative path: bytes}``.

    Hidden names (locks, temp files, manifests) are left out, as every reader leaves them,
    and so is the pool report (report/index.html: a page naming its store and time).
    """
    from statepool_dagster.core.locations import as_path, is_local

    root = as_path(root)
    if is_local(root):
        paths = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    else:
        base = root.path.rstrip("/") + "/"
        paths = {
            name[len(base) :]: root.joinpath(*name[len(base) :].split("/"))
            for name in root.fs.find(root.path)
        }
    return {
        rel: path.read_bytes()
        for rel, path in sorted(paths.items())
        if not any(part.startswith(".") for part in rel.split("/"))
        and not rel.startswith("report/")
    }


def assert_same_store(store, expected: Path) -> None:
    """Same files; JSON and JSONL byte for byte; Parquet tables equal, metadata included."""
    from statepool_dagster.core.locations import as_path
    from statepool_dagster.core.store.atomic import read_parquet

    ours, theirs = store_files(store), store_files(expected)
    assert sorted(ours) == sorted(theirs)
    for rel, data in ours.items():
        if rel.endswith(".parquet"):
            table = read_parquet(as_path(store).joinpath(*rel.split("/")))
            assert table.equals(read_parquet(expected / rel), check_metadata=True), rel
        else:
            assert data == theirs[rel], rel


# The command in a child that reports its own high-water mark (VmHWM) as it exits: a
# forked child's ru_maxrss would include the test process's memory at the fork.
CHILD = """
import atexit, os, sys

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(os.environ["PEAK_FILE_FOR_TEST"], "w").write(line.split()[1])

atexit.register(peak)
from statepool_dagster.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def peak_rss_mb(env: dict[str, str], cwd: Path, *args: str) -> float:
    """The peak resident memory of one ``statepool`` command, in MB (it must succeed)."""
    report = cwd / "peak_kb"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        env={**env, "PEAK_FILE_FOR_TEST": str(report)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return int(report.read_text()) / 1024
