"""An idle ``statepool sync`` answered without opening Dagster: the instance's answers kept.

Before it knows there is nothing to do, a sync asks the instance for the runs and sessions
registered as partitions and the fingerprint each run was last built from. With the project's
instance config (SQLite files under ``DAGSTER_HOME``) no answer changes unless one of those
files does, so a sync keeps the answers beside the files' stamps (``statepool-idle.json``). The
next sync finding the same stamps and settings asks the core whether the sensors would ask for
anything with these answers (``idle_plan``). Anything to build,
or any doubt, and it opens Dagster as always: opening it costs most of an idle sync's CPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

from ..core import Settings, idle_plan
from .console import SyncSummary

RECEIPT = "statepool-idle.json"
RECEIPT_VERSION = 1
# A write within the clock's granularity of an earlier one could leave a file's stamp as it was.
SETTLED_SECONDS = 1.0


def instance_stamp(home: Path) -> list[list] | None:
    """Name, size, mtime and inode of every database file of the instance; ``None`` when its
    config is not the project's (then its storage may be anywhere)."""
    import yaml

    from .console import INSTANCE_CONFIG

    try:
        if yaml.safe_load((home / "dagster.yaml").read_bytes()) != yaml.safe_load(INSTANCE_CONFIG):
            return None
    except (OSError, yaml.YAMLError):
        return None
    found = []
    for folder in ("history", "history/runs", "schedules"):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in os.scandir(home / folder):
                # -shm is shared memory readers touch too; the database and its WAL hold the data
                if entry.is_file() and not entry.name.endswith("-shm"):
                    st = entry.stat()
                    found.append([f"{folder}/{entry.name}", st.st_size, st.st_mtime_ns, st.st_ino])
    return sorted(found)


def _key(settings: Settings, home: Path) -> str:
    text = json.dumps(
        [RECEIPT_VERSION, str(home), settings.model_dump(mode="json")], sort_keys=True
    )
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def idle_summary(settings: Settings, home: Path, settle_seconds: float) -> SyncSummary | None:
    """The summary of a sync with nothing to do, known from the receipt and the folders;
    ``None``: ask Dagster."""
    try:
        receipt = json.loads((home / RECEIPT).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(receipt, dict) or receipt.get("key") != _key(settings, home):
        return None
    if receipt.get("stamp") != instance_stamp(home):
        return None
    plan = idle_plan(
        settings, receipt["runs"], receipt["recorded"], receipt["sessions"], settle_seconds
    )
    return None if plan is None else SyncSummary(plan)


def keep_receipt(instance, settings: Settings) -> bool:
    """Keep the instance's answers for the next sync, when its files hold still while they are
    read; True when kept."""
    from ..core.names import RUNS, SESSIONS_PARTITIONS
    from ..core.store import write_bytes_atomic
    from ..defs.runs.fingerprints import recorded_fingerprints

    home = Path(instance.root_directory)
    before = instance_stamp(home)
    newest = max((f[2] for f in before or ()), default=0) / 1e9
    if before is not None and time.time() - newest >= SETTLED_SECONDS:
        receipt = {
            "key": _key(settings, home),
            "stamp": before,
            "runs": sorted(instance.get_dynamic_partitions(RUNS)),
            "recorded": recorded_fingerprints(instance),
            "sessions": sorted(instance.get_dynamic_partitions(SESSIONS_PARTITIONS)),
        }
        if instance_stamp(home) == before:  # else written meanwhile: the answers may be half old
            write_bytes_atomic(home / RECEIPT, json.dumps(receipt).encode())
            return True
    (home / RECEIPT).unlink(missing_ok=True)
    return False
