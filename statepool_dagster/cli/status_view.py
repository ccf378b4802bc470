"""What ``statepool status`` prints: runs, sessions and the feedback fold, as tables or JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .console import dagster_instance, start_up


def collect(args: argparse.Namespace | None = None) -> dict[str, Any]:
    """``{"runs": [...], "sessions": [...], "feedback": {...}}`` from the instance and indexes."""
    with start_up():
        from ..core import Settings
        from . import preflight

        store_name = preflight.use_store_flag(args)
        settings = Settings.from_env()
        preflight.runs_folder(settings)
        preflight.store_folder(settings.store_dir, store_name, must_exist=True)
        # Dagster only once the settings pass: a refusal is one line, at once.
        from .status import run_statuses
        from .status_sessions import feedback_status, session_statuses

        instance = dagster_instance()
    return {
        "runs": run_statuses(instance, settings),
        "sessions": session_statuses(instance, settings),
        "feedback": feedback_status(instance, settings),
    }


def _runs(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'run':<32}{'status':<14}{'states':>8}{'ignored':>9}  last materialized"]
    for row in rows:
        when = row["last_materialized"] or "-"
        ignored = row["ignored_files"]
        lines.append(f"{row['run']:<32}{row['status']:<14}{row['states']:>8}{ignored:>9}  {when}")
    return lines


def _sessions(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return ["sessions: none"]
    lines = [
        f"{'session':<32}{'status':<14}{'states':>8}{'segments':>10}{'waiting':>9}{'writers':>9}"
        f"{'rejects':>9}  {'last seal':<21}last materialized"
    ]
    for row in rows:
        seal = row["last_seal"] or ("folder missing" if not row["folder_on_disk"] else "-")
        lines.append(
            f"{row['session']:<32}{row['status']:<14}{row['states']:>8}{row['segments']:>10}"
            f"{row['segments_pending']:>9}{len(row['writers']):>9}{row['rejects']:>9}  {seal:<21}"
            f"{row['last_materialized'] or '-'}"
        )
    return lines


def _feedback(fb: dict[str, Any]) -> list[str]:
    waiting = f", {fb['segments_waiting']} waiting" if fb["segments_waiting"] else ""
    states = "unknown" if fb["states"] is None else fb["states"]
    done = fb["last_materialized"]
    return [
        f"feedback ({fb['feedback']})",
        f"  {'states with statistics':<24}{states}",
        f"  {'records folded':<24}{fb['records']} (bad lines: {fb['bad_lines']})",
        f"  {'segments folded':<24}{fb['segments_folded']}{waiting}",
        f"  {'last fold':<24}{fb['last_fold'] or 'never'}",
        f"  {'state_stats':<24}{fb['state_stats']}" + (f", {done}" if done else ""),
    ]


def cmd_status(args: argparse.Namespace) -> int:
    status = collect(args)
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    lines = [*_runs(status["runs"]), "", *_sessions(status["sessions"]), ""]
    print("\n".join([*lines, *_feedback(status["feedback"])]))
    return 0
