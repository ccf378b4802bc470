"""The ``statepool`` command: sync, demo, status, export, report, score."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .core.config import Settings

DEFAULT_HOME = ".dagster_home"


def ensure_dagster_home() -> Path:
    """``DAGSTER_HOME``, by default ``./.dagster_home`` (using ``./dagster.yaml`` if present).

    Creating a new home is said once on stderr: run from the wrong folder, a command would
    otherwise quietly show an empty instance.
    """
    home = os.environ.get("DAGSTER_HOME")
    path = Path(home) if home else Path.cwd() / DEFAULT_HOME
    path = path.resolve()
    if not path.exists():
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
    os.environ["DAGSTER_HOME"] = str(path)
    return path


def _instance():
    from dagster import DagsterInstance

    ensure_dagster_home()
    return DagsterInstance.get()


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


def _summary_table(summary) -> str:
    counts = summary.counts()
    lines = ["", f"{'runs seen':<16}{counts['seen']:>8}"]
    for key in ("new", "changed", "unchanged", "settling", "invalid", "failed"):
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
    return "\n".join(lines)


def _summary_json(summary) -> dict[str, Any]:
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
    }


def cmd_sync(args: argparse.Namespace, announce_report: bool = True) -> int:
    import gc

    from . import preflight
    from .definitions import defs  # noqa: F401  (loaded before the heap is frozen)
    from .interrupts import Interrupted, watch_signals
    from .sync import BATCH_SIZE, sync

    settings = Settings.from_env()
    preflight.runs_folder(settings)
    preflight.store_folder(settings.store_dir)
    instance = _instance()
    # Everything loaded so far lives as long as the command: the collector need not walk it.
    gc.freeze()
    reporter = Reporter(args.quiet, args.json)
    try:
        with watch_signals():
            summary = sync(
                instance,
                settle_seconds=args.settle or 0.0,
                on_plan=reporter.plan,
                on_outcome=reporter.outcome,
                log_level="DEBUG" if args.verbose else "ERROR",
                batch_size=BATCH_SIZE,
            )
    except Interrupted as stop:
        # Store files are written whole or not at all; the runs built so far are kept.
        print(
            f"statepool sync: {stop}; {reporter.done} of {reporter.total} runs done, "
            "the rest left for the next sync",
            file=sys.stderr,
            flush=True,
        )
        return stop.exit_code
    report = None
    if summary.outcomes or not _report_path(settings).exists():
        report = _write_report(settings, collect=False)  # splits: the last export's
    if args.json:
        print(json.dumps({**_summary_json(summary), "report": report}, indent=1))
    elif not args.quiet:
        print(_summary_table(summary))
        if report and announce_report:
            print(f"report: {report}")
    return 1 if summary.failed else 0


# Enough runs that the default export (val 10 %, seed 0) puts one in every split; the
# prefix is what makes that so with four: split_of hashes the run's name.
DEMO_SPEC_FIELDS = {"n_runs": 4, "run_prefix": "demo_run"}


def cmd_demo(args: argparse.Namespace) -> int:
    import tempfile

    from . import preflight
    from .core.locations import is_local, upload_tree
    from .core.names import PROMPTS
    from .demo.sample_runs import SampleSpec, generate_runs
    from .resources import statepool_settings

    settings = statepool_settings.settings()
    runs = preflight.runs_folder(settings, create=True)
    preflight.store_folder(settings.store_dir)
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
        f"report: {_report_path(settings)}\n"
        "open the UI:  make dev   (dagster dev on http://127.0.0.1:3000)"
    )
    return code


def _materialize_training_dataset(verbose: bool = False) -> str | None:
    """``training_dataset`` through Dagster, as the UI would; the error's first line if it fails."""
    from dagster import AssetKey

    from .definitions import defs
    from .sync import _first_error as first_error

    job = defs.resolve_implicit_global_asset_job_def()
    level = "DEBUG" if verbose else "ERROR"
    result = job.execute_in_process(
        instance=_instance(),
        asset_selection=[AssetKey("training_dataset")],
        raise_on_error=False,
        run_config={"loggers": {"console": {"config": {"log_level": level}}}},
    )
    return None if result.success else first_error(result)


def _report_path(settings: Settings):
    from .core.report import report_path
    from .core.store.layout import StoreLayout

    return report_path(StoreLayout(settings.store_dir))


def _write_report(settings: Settings, collect: bool = True) -> str:
    from .core.report import write_report

    options = settings.export_options()
    return str(write_report(settings.store_dir, options, settings.runs_dir, collect=collect))


def cmd_report(args: argparse.Namespace) -> int:
    """Write the pool report (store/report/index.html) from the store's files."""
    from . import preflight

    settings = Settings.from_env(store_dir=args.store)
    preflight.store_folder(
        settings.store_dir, "--store" if args.store else preflight.STORE_SETTING, must_exist=True
    )
    print(_write_report(settings))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from . import preflight
    from .resources import statepool_settings
    from .status import run_statuses

    settings = statepool_settings.settings()
    preflight.runs_folder(settings)
    preflight.store_folder(settings.store_dir, must_exist=True)
    rows = run_statuses(_instance(), settings)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'run':<32}{'status':<14}{'states':>8}{'ignored':>9}  last materialized")
    for row in rows:
        when = row["last_materialized"] or "-"
        ignored = row["ignored_files"]
        print(f"{row['run']:<32}{row['status']:<14}{row['states']:>8}{ignored:>9}  {when}")
    return 0


# Settings an export takes from its flags: a bad value is reported under the flag's name.
EXPORT_FLAGS = {
    "store_dir": ("--store", "store"),
    "export_val_fraction": ("--val-fraction", "val_fraction"),
    "export_test_fraction": ("--test-fraction", "test_fraction"),
    "export_seed": ("--seed", "seed"),
}


def _export_settings(args: argparse.Namespace) -> Settings:
    """The export's settings; a bad value raises one line naming its flag (or variable)."""
    from pydantic import ValidationError

    from .core.errors import StatepoolError

    given = {field: getattr(args, attr) for field, (_, attr) in EXPORT_FLAGS.items()}
    try:
        settings = Settings.from_env(**given)
        settings.export_options()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else None
        if field in EXPORT_FLAGS and given[field] is not None:
            name = EXPORT_FLAGS[field][0]
        elif field:
            name = Settings.env_name(field)
        else:
            name = "--val-fraction + --test-fraction"
        raise StatepoolError(f"{name}: {first['msg'].removeprefix('Value error, ')}") from None
    return settings


def cmd_export(args: argparse.Namespace) -> int:
    """Write one trainer-ready export of the store; reads files only, never Dagster."""
    from . import preflight
    from .core.errors import StatepoolError
    from .core.export.collect import collect_export, empty_train_problem
    from .core.export.write import write_export
    from .core.locations import absolute, as_path

    settings = _export_settings(args)
    store_name = "--store" if args.store else preflight.STORE_SETTING
    preflight.store_folder(settings.store_dir, store_name, must_exist=True)
    if args.max_prompt_tokens is not None and args.max_prompt_tokens < 1:
        raise StatepoolError("--max-prompt-tokens: must be at least 1")
    options = settings.export_options()
    export = collect_export(settings.store_dir, options)
    if not export.rows:
        for problem in export.problems:
            print(problem, file=sys.stderr)
        print(
            f"statepool export: {store_name}: store {settings.store_dir} holds no materialized "
            "run: nothing to export (`statepool sync` first)",
            file=sys.stderr,
        )
        return 1
    if args.tokenizer is not None or args.max_prompt_tokens is not None:
        from .core.export.lengths import load_counter, measure_prompts

        measure_prompts(export, load_counter(args.tokenizer), args.max_prompt_tokens)
    problem = empty_train_problem(export)
    if problem:
        flags = ", ".join(
            f"{flag} {value}"
            for flag, value in (
                ("--val-fraction", args.val_fraction),
                ("--test-fraction", args.test_fraction),
            )
            if value is not None
        )
        raise StatepoolError(f"{flags or 'the split settings'}: {problem}")
    try:
        write_export(export, args.format, args.out, force=args.force)
    except StatepoolError as exc:
        raise StatepoolError(f"--out: {exc}") from None
    for problem in export.problems:
        print(problem, file=sys.stderr)
    out = str(absolute(as_path(args.out)))
    summary = {"format": args.format, "out": out, **export.summary()}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        rows = ", ".join(f"{split} {n}" for split, n in summary["rows"].items())
        runs = ", ".join(f"{split} {len(r)}" for split, r in summary["runs"].items())
        print(f"{args.format} export in {summary['out']}: rows {rows}; runs {runs}")
        if export.duplicates:
            print(f"{len(export.duplicates)} duplicate states left out (see above)")
        if export.prompt_lengths is not None:
            lengths = export.prompt_lengths
            print(
                f"prompt tokens ({lengths['method']}): longest {lengths['longest']}, "
                f"median {lengths['median']}; {len(lengths['left_out'])} over the limit left out"
            )
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    """Grade a completions file against the store's states; reads files only, never Dagster."""
    from .core.rewards.completions import score_completions, store_states
    from .core.rewards.grader import Grader
    from .core.rewards.report import score_table

    settings = Settings.from_env(store_dir=args.store)
    grader = Grader.from_settings(settings)
    states, problems = store_states(settings.store_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not states:
        print(f"statepool score: no states in the store {settings.store_dir}", file=sys.stderr)
        return 2
    report = score_completions(args.completions, states, grader)
    report.store_problems = problems
    for bad in report.bad_lines:
        print(f"bad line: {bad}", file=sys.stderr)
    for sid, lines in report.unknown_states.items():
        where = ", ".join(str(n) for n in lines)
        print(f"unknown state id {sid!r} ({args.completions} line {where})", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(score_table(report))
    return 0 if report.complete else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="statepool", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in (
        ("sync", cmd_sync, "register new runs, materialize new and changed ones"),
        ("demo", cmd_demo, "generate sample runs if the runs folder is empty, then sync"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(func=func)
        p.add_argument("--settle", type=float, default=None, help="wait for files this old (s)")
        p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
        p.add_argument("--json", action="store_true", help="print the summary as JSON")
        p.add_argument("-v", "--verbose", action="store_true", help="show Dagster's own logs")
        # Every sync records the asset checks now; the flag is accepted for old scripts.
        p.add_argument("--checks", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser("status", help="each run's partition state")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("export", help="write a trainer-ready export of the store (no Dagster)")
    p.add_argument("--format", required=True, choices=("verl", "trl", "pool"))
    p.add_argument("--out", required=True, help="folder to write (new, empty or an earlier export)")
    p.add_argument("--val-fraction", type=float, default=None, help="share of runs in val")
    p.add_argument("--test-fraction", type=float, default=None, help="share of runs in test")
    p.add_argument("--seed", type=int, default=None, help="seed of the run-level split")
    p.add_argument("--store", default=None, help="store root (default STATEPOOL_STORE_DIR)")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="local tokenizer folder or tokenizer.json: rows get prompt_tokens (never downloaded)",
    )
    p.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="leave out (and name) states whose prompt is longer (without --tokenizer: "
        "estimated from characters)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--force", action="store_true", help="replace an earlier export of another format"
    )
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("report", help="write the pool report, store/report/index.html")
    p.add_argument("--store", default=None, help="store root (default STATEPOOL_STORE_DIR)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser(
        "score", help="grade curator answers (JSONL: state_id, completion) against the store"
    )
    p.add_argument("--completions", required=True, help="JSONL file, one answer a line")
    p.add_argument("--store", default=None, help="store root (default STATEPOOL_STORE_DIR)")
    p.add_argument("--json", action="store_true", help="print rows, groups and summary as JSON")
    p.set_defaults(func=cmd_score)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from .core.errors import StatepoolError

    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        code = args.func(args)
    except ValidationError as exc:
        print(f"statepool: {Settings.describe_error(exc)}", file=sys.stderr)
        return 2
    except StatepoolError as exc:
        print(f"statepool: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "verbose", False):
        print(f"({time.perf_counter() - started:.2f}s)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
