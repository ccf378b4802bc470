"""What a finished run of this code location says: each materialization's metadata, a built
run's counts in it, and the root cause of its first failure (for the command line, which runs
the jobs in process)."""

from __future__ import annotations

from typing import Any

from ..core.names import IGNORED_METADATA, REJECT_COUNTS, STATE_COUNT, STATES


def materialized(result) -> dict[tuple[str, str | None], dict[str, Any]]:
    """``{(asset, partition): metadata}`` of every materialization a run's ``result`` recorded."""
    found = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        key = (materialization.asset_key.to_user_string(), materialization.partition)
        found[key] = materialization.metadata
    return found


def built_counts(found: dict[tuple[str, str | None], dict], run: str) -> tuple[int, int, int]:
    """A built run's states, rejects and ignored files, read back from the metadata the
    run assets recorded (``found``: :func:`materialized`)."""

    def value(asset: str, key: str):
        metadata = found.get((asset, run), {})
        return metadata[key].value if key in metadata else None

    rejects = sum(int(value(asset, key) or 0) for asset, key in REJECT_COUNTS)
    ignored = sum(len(value(asset, key) or {}) for asset, key in IGNORED_METADATA)
    return int(value(STATES, STATE_COUNT) or 0), rejects, ignored


def first_error(result) -> str:
    """The root cause of the first failed step, without Dagster's wrapping ("" if none failed)."""
    if result.success:
        return ""
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            message = error.message.strip().split(f"{error.cls_name}: ", 1)[-1]
            return message.splitlines()[0] if message else error.cls_name
    return "run failed"
