"""``statepool feedback``: verl rollout dumps or ``statepool score --json`` output into feedback.

``--fold`` then materializes ``state_stats`` (in this process, on the instance ``statepool
sync`` uses), folding the new feedback segments as the sensor's runs do.
Exit codes: 0 every line imported (or already imported), 1 some lines were rejects
(the rest imported), 2 nothing to read (a missing folder or file).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..core import Settings, plural


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``statepool feedback`` on the main parser's sub-commands."""
    help_text = "record verl rollout dumps or the output of 'statepool score --json' as feedback"
    p = sub.add_parser("feedback", help=help_text, description=help_text)
    source = p.add_mutually_exclusive_group()
    source.add_argument("--from-verl-dump", metavar="DIR", help="trainer.rollout_data_dir")
    source.add_argument("--from-scores", metavar="FILE", help="what 'statepool score --json' wrote")
    p.add_argument(
        "--to",
        default=None,
        help="feedback folder (default STATEPOOL_FEEDBACK_DIR, else <store>/feedback)",
    )
    p.add_argument("--store", default=None, help="store root (default STATEPOOL_STORE_DIR)")
    p.add_argument(
        "--fold",
        action="store_true",
        help="then materialize state_stats: fold new feedback segments as the sensor's runs do",
    )
    p.add_argument("--json", action="store_true", help="print the import's report as JSON")
    p.set_defaults(func=cmd_feedback)


def cmd_feedback(args: argparse.Namespace) -> int:
    from ..core import StatepoolError
    from ..core.feedback import ImportReport, feedback_folder, import_scores, import_verl_dump

    if not (args.from_verl_dump or args.from_scores or args.fold):
        raise StatepoolError(
            "nothing to do: give --from-verl-dump DIR, --from-scores FILE or --fold"
        )
    settings = Settings.from_env(store_dir=args.store)
    folder = args.to or feedback_folder(settings)
    try:
        if args.from_verl_dump:
            report = import_verl_dump(folder, args.from_verl_dump)
        elif args.from_scores:
            report = import_scores(folder, args.from_scores)
        else:
            report = ImportReport()
    except StatepoolError as exc:
        flag = "--from-verl-dump" if args.from_verl_dump else "--from-scores"
        raise StatepoolError(f"{flag}: {exc}") from None
    for reject in report.rejects:
        print(f"statepool feedback: {reject}", file=sys.stderr)
    summary = {"feedback": folder, **report.to_dict()}
    if args.fold:
        summary["stats"] = _fold(settings, folder)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        if args.from_verl_dump or args.from_scores:
            done = len(report.already_imported)
            again = f", {done} already imported" if done else ""
            print(
                f"{plural(report.records, 'record')} from {plural(report.files, 'file')} "
                f"into {folder} ({plural(len(report.segments), 'segment')}, "
                f"{plural(len(report.rejects), 'reject')}{again})"
            )
        if args.fold:
            stats = summary["stats"]
            print(
                f"state_stats: {plural(stats['states'], 'state')}, "
                f"{plural(stats['new_segments'], 'new segment')} "
                f"({plural(stats['new_records'], 'record')}, "
                f"{plural(stats['bad_lines'], 'bad line')})"
            )
    return 1 if report.rejects else 0


def _fold(settings: Settings, folder: str) -> dict:
    """``state_stats`` materialized through Dagster, folding ``folder``'s new segments."""
    from ..core import StatepoolError
    from .console import dagster_instance, start_up
    from .sync import fold_feedback

    with start_up():
        instance = dagster_instance()
    with_folder = settings.model_copy(update={"feedback_dir": folder})
    done = fold_feedback(instance, with_folder, force=True)
    if not done.ok:
        raise StatepoolError(f"state_stats failed: {done.error}")
    return {
        "states": done.states,
        "new_segments": done.segments,
        "new_records": done.records,
        "bad_lines": done.bad_lines,
    }
