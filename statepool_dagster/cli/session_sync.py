"""``statepool sync`` for sessions: register new session folders, build their new segments."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import Settings


@dataclass
class SessionOutcome:
    """One session's build in a sync."""

    session: str
    pending: int
    ok: bool
    error: str = ""


def sync_sessions(instance, settings: Settings, log_level: str = "ERROR") -> list[SessionOutcome]:
    """Every session with sealed segments not built yet (or gone), built through Dagster."""
    from ..core.names import SESSIONS_PARTITIONS
    from ..core.sessions.layout import discover_sessions

    sessions, _ = discover_sessions(settings.sessions_dir)
    if not sessions:
        return []
    from ..core.sessions.build import pending_segments
    from .sync import _first_error as first_error

    known = set(instance.get_dynamic_partitions(SESSIONS_PARTITIONS))
    new = [s for s in sessions if s not in known]
    if new:
        instance.add_dynamic_partitions(SESSIONS_PARTITIONS, new)
    job = None  # the definitions loaded only for a session to build
    outcomes = []
    for session in sessions:
        pending = pending_segments(settings.sessions_dir, settings.store_dir, session)
        if not pending and session in known:
            continue
        if job is None:
            from ..definitions import defs
            from ..defs.sessions import SESSIONS_JOB

            job = defs.resolve_job_def(SESSIONS_JOB)
        result = job.execute_in_process(
            instance=instance,
            partition_key=session,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
        error = "" if result.success else first_error(result)
        outcomes.append(SessionOutcome(session, len(pending), result.success, error))
    return outcomes
