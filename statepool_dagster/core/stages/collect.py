"""A run folder's checkpoint states in memory: the build stages into a scratch store, read back.

The original script's ``collect_from_run`` and the tests of its behaviour go through
exactly the join the assets run; nothing here joins on its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Followup, Pairing, Settings
from ..names import EPISODES, IGNORED_FILES, SNAPSHOTS, STATES
from ..rejects import Reject
from ..states.join import SkippedCheckpoint
from ..states.models import CheckpointState
from ..store.layout import StoreLayout, read_rejects
from ..store.reading import read_run_table
from .run import build_run


@dataclass(frozen=True)
class JoinedState:
    """A checkpoint state plus where its parts came from."""

    run: str
    version: int
    batch_version: int
    library_version: int
    text: str  # the state file's bytes, as the original writes them
    reference_ops: dict[str, Any]

    @property
    def state(self) -> CheckpointState:
        return CheckpointState.from_json(self.text)


@dataclass
class RunRead:
    """Everything the build got from one run folder."""

    run: str
    states: list[JoinedState] = field(default_factory=list)
    skipped: list[SkippedCheckpoint] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)


def read_run(
    run_dir: str | os.PathLike[str],
    dataset: str = "ovo",
    strict: bool = False,
    *,
    pairing: Pairing = "seed",
    followup: Followup = "none",
) -> RunRead:
    """Read a run folder and join its checkpoint states (the seed's ``collect_from_run``)."""
    run_dir = Path(run_dir)
    run = run_dir.name
    with tempfile.TemporaryDirectory(prefix="statepool-read-") as store:
        settings = Settings(
            runs_dir=str(run_dir.parent),
            store_dir=store,
            dataset=dataset,
            on_bad_record="fail" if strict else "keep",
            pairing=pairing,
            followup=followup,
            workers=1,
        )
        reports = build_run(settings, run, (EPISODES, SNAPSHOTS, STATES))
        layout = StoreLayout(store)
        rows = read_run_table(layout, STATES, run).to_pylist()
        rejects = read_rejects(layout, run)
    states = [
        JoinedState(
            run,
            row["version"],
            row["batch_version"],
            row["library_version"],
            row["state"],
            json.loads(row["reference_ops"]),
        )
        for row in rows
    ]
    skipped = [
        SkippedCheckpoint(int(k), reason) for k, reason in reports[STATES].json["skipped"].items()
    ]
    return RunRead(run, states, skipped, rejects, dict(reports[SNAPSHOTS].json[IGNORED_FILES]))
