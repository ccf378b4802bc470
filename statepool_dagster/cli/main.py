"""The ``statepool`` command: every sub-command's parser, and sync and demo themselves."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core import Settings, plural
from ..core.names import EXPORT_FORMATS, TRAINING_DATASET
from . import feedback, values
from .console import Reporter, dagster_instance, ensure_dagster_home, start_up, summary_table
from .file_commands import cmd_export, cmd_report, cmd_score, pool_report_path, write_pool_report
from .ingest import add_parser as add_ingest_parser
from .lineage import add_parser as add_lineage_parser
from .status_view import cmd_status


def cmd_sync(args: argparse.Namespace, announce_report: bool = True) -> int:
    with start_up():
        from . import preflight

        store_name = preflight.use_store_flag(args)
        settings = Settings.from_env()
        preflight.runs_folder(settings)
        preflight.store_folder(settings.store_dir, store_name)
        preflight.prompt_spec(settings)
        from .idle import idle_summary

        summary = idle_summary(settings, ensure_dagster_home(), args.settle or 0.0)
    reporter = Reporter(args.quiet, args.json)
    if summary is not None:
        if args.verbose:
            print("statepool sync: nothing changed since the instance last answered (kept in "
                  "statepool-idle.json): Dagster not opened", file=sys.stderr)  # fmt: skip
        reporter.plan(summary.plan)
        return _summed_up(args, settings, summary, announce_report)
    with start_up():
        # Dagster only once the settings pass: a refusal is one line, at once.
        from .interrupts import Interrupted, watch_signals
        from .sync import sync

        instance = dagster_instance()

    def on_plan(plan) -> None:
        if plan.to_materialize:  # the definitions, only for runs to build (idle: none)
            with start_up():
                from ..core.names import JOB
                from ..definitions import defs

                defs().resolve_job_def(JOB)
        reporter.plan(plan)

    try:
        with watch_signals():
            summary = sync(
                instance,
                settle_seconds=args.settle or 0.0,
                on_plan=on_plan,
                on_outcome=reporter.outcome,
                log_level="DEBUG" if args.verbose else "ERROR",
            )
    except Interrupted as stop:
        # Store files are written whole or not at all; the runs built so far are kept.
        print(
            f"statepool sync: {stop}; {reporter.done} of {plural(reporter.total, 'run')} done, "
            "the rest left for the next sync",
            file=sys.stderr,
            flush=True,
        )
        return stop.exit_code
    from .idle import keep_receipt

    keep_receipt(instance, settings)
    return _summed_up(args, settings, summary, announce_report)


def _summed_up(args: argparse.Namespace, settings: Settings, summary, announce_report: bool) -> int:
    """What a sync prints at the end, the report it writes, and its exit code."""
    from .console import summary_json

    for failed in summary.failed_sessions:
        print(f"statepool sync: session {failed.session}: {failed.error}", file=sys.stderr)
    if not summary.feedback.ok:
        print(f"statepool sync: state_stats: {summary.feedback.error}", file=sys.stderr)
    report = None
    if summary.outcomes or not pool_report_path(settings).exists():
        report = write_pool_report(settings, collect=False)  # splits: the last export's
    if args.json:
        print(json.dumps({**summary_json(summary), "report": report}, indent=1))
    elif not args.quiet:
        print(summary_table(summary))
        if report and announce_report:
            print(f"report: {report}")
    return 1 if summary.failed or summary.failed_sessions or not summary.feedback.ok else 0


# Enough runs that the default export (val 10 %, seed 0) puts one in every split; the
# prefix is what makes that so with four: split_of hashes the run's name.
DEMO_SPEC_FIELDS = {"n_runs": 4, "run_prefix": "demo_run"}


def cmd_demo(args: argparse.Namespace) -> int:
    import tempfile

    from ..core import is_local, upload_tree
    from ..core.names import PROMPTS
    from ..demo.sample_runs import SampleSpec, generate_runs
    from . import preflight

    store_name = preflight.use_store_flag(args)
    settings = Settings.from_env()
    runs = preflight.runs_folder(settings, create=True)
    preflight.store_folder(settings.store_dir, store_name)
    if not runs.is_dir() or not any(p for p in runs.iterdir() if not p.name.startswith(".")):
        spec = SampleSpec(**DEMO_SPEC_FIELDS)
        if is_local(runs):
            generate_runs(runs, spec)
        else:
            with tempfile.TemporaryDirectory() as local:
                generate_runs(local, spec)
                upload_tree(Path(local), runs)
        print(f"generated sample runs in {runs}/")
    code = cmd_sync(args, announce_report=False)
    if getattr(args, "sessions", False):
        code = _demo_sessions(settings, args) or code
    dataset = _materialize_training_dataset(args.verbose)
    if dataset:
        print(f"statepool demo: training_dataset failed: {dataset}", file=sys.stderr)
        code = code or 1
    if args.json or args.quiet:
        return code
    print(
        f"\nstates: {settings.store_dir}/state_pool/<run>/   prompts: "
        f"{settings.store_dir}/{PROMPTS}/<run>/\n"
        f"exports: {settings.store_dir}/exports/{{verl,trl,pool}}/ (training_dataset)\n"
        f"report: {pool_report_path(settings)}\n"
        f"open the UI:  {ui_command()}"
    )
    return code


def ui_command() -> str:
    """How to open the UI from here: ``make dev`` in the repository, else ``dg dev`` in a dg
    project, else Dagster's own command on the package's definitions and this instance."""
    import os
    import re

    from .console import DEFAULT_HOME
    from .dg_home import is_dg_project

    here = Path.cwd()
    makefile = here / "Makefile"
    text = makefile.read_text(encoding="utf-8", errors="replace") if makefile.is_file() else ""
    if re.search(r"^dev:", text, re.M):
        return "make dev   (dg dev on http://127.0.0.1:3000)"
    if is_dg_project(here):
        return "dg dev   (on http://127.0.0.1:3000)"
    home = os.environ.get("DAGSTER_HOME", DEFAULT_HOME)  # set by now: the one just used
    return f"DAGSTER_HOME={home} dagster dev -m statepool_dagster.definitions"


def _demo_sessions(settings: Settings, args: argparse.Namespace) -> int:
    """A simulated rollout over the sample runs' states, then the session built."""
    from ..demo.rollout import simulate_rollout
    from ..readers import load_state_pool
    from .sync import sync_sessions

    states = load_state_pool(settings.store_dir)[:12]
    folder = simulate_rollout(states, settings.sessions_dir)
    outcomes = sync_sessions(dagster_instance(), settings, "DEBUG" if args.verbose else "ERROR")
    failed = [o for o in outcomes if not o.ok]
    for outcome in failed:
        print(f"statepool demo: session {outcome.session}: {outcome.error}", file=sys.stderr)
    if not (args.json or args.quiet):
        print(f"simulated rollout: 3 writers wrote {folder}/segments/; session built")
    return 1 if failed else 0


def _materialize_training_dataset(verbose: bool = False) -> str | None:
    """``training_dataset`` through Dagster, as the UI would; the error's first line if it fails."""
    from dagster import AssetKey

    from ..definitions import defs
    from ..defs.results import first_error

    job = defs().resolve_implicit_global_asset_job_def()
    level = "DEBUG" if verbose else "ERROR"
    result = job.execute_in_process(
        instance=dagster_instance(),
        asset_selection=[AssetKey(TRAINING_DATASET)],
        raise_on_error=False,
        run_config={"loggers": {"console": {"config": {"log_level": level}}}},
    )
    return None if result.success else first_error(result)


STORE_HELP = "store root (default STATEPOOL_STORE_DIR)"


def _command(sub, name: str, help_text: str) -> argparse.ArgumentParser:
    """A sub-command whose one line of help is also its ``--help`` description."""
    return sub.add_parser(name, help=help_text, description=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = values.Parser(prog="statepool", description=values.DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in (
        (
            "sync",
            cmd_sync,
            "do now what the sensors do: build new and changed runs, sessions' new sealed "
            "segments, and fold new feedback into state_stats; a line for each",
        ),
        ("demo", cmd_demo, "generate sample runs if the runs folder is empty, then sync"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        p.add_argument("--settle", type=values.SECONDS, help="wait for files this old (s)")
        p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
        p.add_argument("--json", action="store_true", help="print the summary as JSON")
        p.add_argument("-v", "--verbose", action="store_true", help="show Dagster's own logs")
        p.add_argument("--store", default=None, help=STORE_HELP)
    sub.choices["demo"].add_argument(
        "--sessions",
        action="store_true",
        help="also run a small simulated rollout writing a session (STATEPOOL_SESSIONS_DIR)",
    )
    p = _command(sub, "status", "each run's and session's partition state, and the feedback fold")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.set_defaults(func=cmd_status)
    p = _command(sub, "export", "write a trainer-ready export of the store (no Dagster)")
    p.add_argument(
        "--format", required=True, choices=EXPORT_FORMATS, help="the trainer the export is for"
    )
    p.add_argument("--out", required=True, help="folder to write (new, empty or an earlier export)")
    p.add_argument("--parents", action="store_true", help="create --out's missing parent folders")
    p.add_argument(
        "--as-of",
        default=None,
        metavar="VERSION",
        help="only the states of this pool version (a trainer checkpoint's; see statepool lineage)",
    )
    p.add_argument("--val-fraction", type=values.FRACTION, help="share of runs in val (0 to 1)")
    p.add_argument("--test-fraction", type=values.FRACTION, help="share of runs in test (0 to 1)")
    p.add_argument("--seed", type=int, default=None, help="seed of the run-level split")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument(
        "--tokenizer",
        default=None,
        help="local tokenizer folder or tokenizer.json: rows get prompt_tokens (never downloaded)",
    )
    p.add_argument(
        "--max-prompt-tokens",
        type=values.POSITIVE,
        default=None,
        help="leave out (and name) states whose prompt is longer (without --tokenizer: "
        "estimated from characters)",
    )
    p.add_argument(
        "--sources",
        default=None,
        metavar="LIST",
        help="runs, sessions or runs,sessions (default STATEPOOL_EXPORT_SOURCES: both)",
    )
    p.add_argument(
        "--max-staleness",
        type=values.STEP,
        default=None,
        metavar="N",
        help="keep only session states at most N policy steps behind their session's newest",
    )
    from .selection_flags import add_selection_arguments

    add_selection_arguments(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--force", action="store_true", help="replace an earlier export of another format"
    )
    p.set_defaults(func=cmd_export)
    p = _command(sub, "report", "write the pool report, store/report/index.html")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.set_defaults(func=cmd_report)
    p = _command(
        sub, "score", "grade curator answers (JSONL: state_id, completion) against the store"
    )
    p.add_argument("--completions", required=True, help="JSONL file, one answer a line")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--json", action="store_true", help="print rows, groups and summary as JSON")
    p.set_defaults(func=cmd_score)
    feedback.add_parser(sub)
    add_ingest_parser(sub)
    add_lineage_parser(sub)
    return parser


# A closed standard output (`statepool status --json | head`): what a shell reports for a
# command SIGPIPE stopped, 128 + 13, after no traceback.
CLOSED_STDOUT = 141


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from ..core import StatepoolError

    args = build_parser().parse_args(argv)
    command = f"statepool {args.command}"
    started = time.perf_counter()
    try:
        code = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    except ValidationError as exc:
        print(f"{command}: {Settings.describe_error(exc)}", file=sys.stderr)
        return 2
    except StatepoolError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "verbose", False):
        print(f"({time.perf_counter() - started:.2f}s)", file=sys.stderr)
    return code


def _stdout_closed() -> int:
    """The reader of standard output went away: nothing more to say, and no flush at exit
    may fail again (Python's documented way: point the descriptor at devnull)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return CLOSED_STDOUT


if __name__ == "__main__":
    sys.exit(main())
