"""The command line's instance home and what `statepool sync` reports: its outcomes, progress
and summary."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.names import Change

if TYPE_CHECKING:
    from ..core.runs import SyncPlan

DEFAULT_HOME = ".dagster_home"


# The instance settings a home this command creates gets when no ./dagster.yaml is there to
# link to (a pip install): the repository's dagster.yaml (tests keep the two the same).
# Telemetry is off as Dagster documents it, an instance setting; it also keeps Dagster's
# banner about it out of every command's output.
INSTANCE_CONFIG = """\
# Written by statepool for a new instance home (the repository's dagster.yaml, the same).
telemetry:
  enabled: false

event_log_storage:
  module: statepool_dagster.storages.sqlite
  class: StatepoolSqliteEventLogStorage

concurrency:
  runs:
    max_concurrent_runs: 4
    tag_concurrency_limits:
      - key: "dagster/partition"
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""


def ensure_dagster_home() -> Path:
    """``DAGSTER_HOME``, by default ``./.dagster_home`` (using ``./dagster.yaml`` if present).

    Creating a new home is said once on stderr: run from the wrong folder, a command would
    otherwise quietly show an empty instance. A new home gets its ``dagster.yaml``; the
    default home, in a ``dg`` project, a ``.env`` line that sends ``dg dev`` and ``dg
    launch`` to it, as ``make install`` writes.
    """
    home = os.environ.get("DAGSTER_HOME")
    path = Path(home) if home else Path.cwd() / DEFAULT_HOME
    path = path.resolve()
    new = not path.exists()
    if new:
        print(
            f"statepool: no Dagster instance in {path}: creating a new one there "
            "(set DAGSTER_HOME to use another)",
            file=sys.stderr,
        )
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    repo_config = Path.cwd() / "dagster.yaml"
    if not home and not config.exists() and repo_config.is_file():
        config.symlink_to(repo_config)
    elif (new or not home) and not config.exists():
        config.write_text(INSTANCE_CONFIG, encoding="utf-8")
    else:
        _move_storage_module(config)
    if not home:
        _point_dg_at(path)
    os.environ["DAGSTER_HOME"] = str(path)
    return path


WRITTEN_HEADER = INSTANCE_CONFIG.splitlines()[0]
_MOVED_STORAGE = (
    "module: statepool_dagster.defs.storage\n",
    "module: statepool_dagster.storages.sqlite\n",
)


def _move_storage_module(config: Path) -> None:
    """A ``dagster.yaml`` this command wrote before the storages left ``defs/`` names the new
    module, so the instance keeps loading (said once on stderr); any other file is the user's."""
    if config.is_symlink() or not config.is_file():
        return
    text = config.read_text(encoding="utf-8", errors="replace")
    old, moved = _MOVED_STORAGE
    if text.startswith(WRITTEN_HEADER) and old in text:
        config.write_text(text.replace(old, moved), encoding="utf-8")
        print(f"statepool: {config}: the event-log storage is now {moved.split()[1]}",
              file=sys.stderr)  # fmt: skip


def _point_dg_at(home: Path) -> None:
    """In a ``dg`` project, the ``.env`` line of ``make install`` (said once on stderr)."""
    from .dg_home import ENV_FILE, is_dg_project, write_dg_env

    project = Path.cwd()
    if is_dg_project(project) and write_dg_env(project, home):
        print(
            f"statepool: {project / ENV_FILE}: DAGSTER_HOME defaults to {home} "
            "(dg dev and dg launch open this instance)",
            file=sys.stderr,
        )


SETUP_LOCK = ".statepool-setup.lock"


@contextlib.contextmanager
def _setup_lock(home: Path) -> Iterator[None]:
    """Held while the instance is opened: Dagster sets up a new SQLite home in several
    statements, and two commands doing it at once fail ("table ... already exists")."""
    from ..core.store import file_lock

    with file_lock(home / SETUP_LOCK):
        yield


@contextlib.contextmanager
def start_up() -> Iterator[None]:
    """A command's start-up (its imports, the instance) without the cycle collector; then
    everything it loaded frozen, out of the collector's reach for the rest of the command.

    Importing Dagster makes hundreds of thousands of long-lived objects and almost no
    garbage: the collector would walk them again and again, a third of the import's time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def dagster_instance():
    """The instance of ``DAGSTER_HOME``; a SQLite event log a kill left half made is finished."""
    from dagster import DagsterInstance

    from ..storages.sqlite import finish_sqlite_setup

    home = ensure_dagster_home()
    with _setup_lock(home):
        instance = DagsterInstance.get()
        finish_sqlite_setup(instance)
    return instance


@dataclass
class RunOutcome:
    """How one run's materialization went."""

    run: str
    status: str  # the plan's status: new | changed
    success: bool
    states: int = 0
    rejects: int = 0
    ignored: int = 0  # files in the run folder passed over (name, duplicate), each with a reason
    seconds: float = 0.0
    error: str | None = None
    elsewhere: bool = False  # built meanwhile by another sync or run: skipped here


@dataclass
class SessionOutcome:
    """One session's build in a sync."""

    session: str
    pending: int  # the sealed segments the sensor saw past what was built
    ok: bool
    error: str = ""


@dataclass
class FeedbackOutcome:
    """The fold of new feedback into ``state_stats`` in a sync (``ran`` False: nothing new)."""

    ran: bool = False
    ok: bool = True
    records: int = 0
    segments: int = 0
    states: int = 0
    bad_lines: int = 0
    error: str = ""
    # The counts: state_stats' metadata key of each.
    COUNTS: ClassVar[dict[str, str]] = {
        "records": "new_records",
        "segments": "new_segments",
        "states": "states",
        "bad_lines": "new_bad_lines",
    }


@dataclass
class SyncSummary:
    """Everything ``statepool sync`` reports."""

    plan: SyncPlan
    outcomes: list[RunOutcome] = field(default_factory=list)
    sessions: list[SessionOutcome] = field(default_factory=list)
    feedback: FeedbackOutcome = field(default_factory=FeedbackOutcome)

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if not o.success]

    @property
    def failed_sessions(self) -> list[SessionOutcome]:
        return [o for o in self.sessions if not o.ok]

    @property
    def states_written(self) -> int:
        return sum(o.states for o in self.outcomes if o.success)

    def counts(self) -> dict[str, int]:
        plan = self.plan
        return {
            "seen": len(plan.runs),
            **{change.value: len(plan.with_status(change)) for change in Change},
            "invalid": len(plan.invalid),
            "failed": len(self.failed),
            "states_written": self.states_written,
        }


class Reporter:
    """Progress lines (a bar on a TTY) and the closing summary."""

    def __init__(self, quiet: bool, as_json: bool, stream=sys.stderr):
        self.quiet = quiet or as_json
        self.stream = stream
        self.tty = stream.isatty()
        self.total = 0
        self.done = 0
        self.states = 0

    def plan(self, plan) -> None:
        self.total = len(plan.to_materialize)
        for name, reason in plan.invalid.items():
            self._line(f"skipped run folder {name!r}: {reason}")
        for problem in plan.problems:
            self._line(problem)
        self._line(f"runs: {plan.describe()}")

    def outcome(self, outcome) -> None:
        self.done += 1
        self.states += outcome.states
        if outcome.success:
            extra = f", {outcome.rejects} rejects" if outcome.rejects else ""
            extra += f", {outcome.ignored} ignored files" if outcome.ignored else ""
            text = f"{outcome.run}: {outcome.states} states{extra} ({outcome.seconds:.1f}s)"
        else:
            text = f"{outcome.run}: FAILED: {outcome.error}"
            if self.quiet:  # failures are never silent
                print(text, file=self.stream, flush=True)
        if self.tty and not self.quiet:
            width = 24
            filled = width * self.done // max(self.total, 1)
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(
                f"\r\x1b[K[{bar}] {self.done}/{self.total} runs, {self.states} states  {text}"
            )
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()
        else:
            self._line(text)

    def _line(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)


def summary_table(summary) -> str:
    counts = summary.counts()
    lines = ["", f"{'runs seen':<16}{counts['seen']:>8}"]
    for key in (*(change.value for change in Change), "invalid", "failed"):
        lines.append(f"{key:<16}{counts[key]:>8}")
    lines.append(f"{'states written':<16}{counts['states_written']:>8}")
    rejected = [o for o in summary.outcomes if o.rejects]
    if rejected:
        lines.append("rejects per run: " + ", ".join(f"{o.run}={o.rejects}" for o in rejected))
    ignored = [o for o in summary.outcomes if o.ignored]
    if ignored:
        lines.append("ignored files per run: " + ", ".join(f"{o.run}={o.ignored}" for o in ignored))
    for o in summary.failed:
        lines.append(f"failed: {o.run}: {o.error}")
    lines.append(
        f"{'runs built':<16}{sum(not o.elsewhere for o in summary.outcomes if o.success):>8}"
    )
    sessions, failed = len(summary.sessions), len(summary.failed_sessions)
    lines.append(
        f"{'sessions built':<16}{sessions - failed:>8}" + (f"  ({failed} failed)" if failed else "")
    )
    fold = summary.feedback
    folded = f"{fold.records:>8}" + (
        f"  into state_stats ({fold.states} states)" if fold.ran else ""
    )
    lines.append(
        f"{'feedback folded':<16}{folded}" + ("" if fold.ok else f"  FAILED: {fold.error}")
    )
    return "\n".join(lines)


def summary_json(summary) -> dict[str, Any]:
    """The ``--json`` report: counts, each run, each session, the feedback fold."""
    return {
        **summary.counts(),
        "runs": [
            {
                "run": o.run,
                "status": o.status,
                "success": o.success,
                "states": o.states,
                "rejects": o.rejects,
                "ignored": o.ignored,
                "seconds": round(o.seconds, 3),
                "error": o.error,
            }
            for o in summary.outcomes
        ],
        "invalid": summary.plan.invalid,
        "sessions": [vars(o) for o in summary.sessions],
        "feedback": vars(summary.feedback),
    }
