"""The commands that only read and write files, never Dagster: export, score, report."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from ..core import Settings, plural


def pool_report_path(settings: Settings):
    from ..core.report import report_path
    from ..core.store import StoreLayout

    return report_path(StoreLayout(settings.store_dir))


def write_pool_report(settings: Settings, collect: bool = True) -> str:
    from ..core.export import ExportOptions
    from ..core.report import write_report

    options = ExportOptions.from_settings(settings)
    return str(write_report(settings.store_dir, options, settings.runs_dir, collect=collect))


def cmd_report(args: argparse.Namespace) -> int:
    """Write the pool report (store/report/index.html) from the store's files."""
    from . import preflight

    settings = Settings.from_env(store_dir=args.store)
    preflight.store_folder(
        settings.store_dir, "--store" if args.store else preflight.STORE_SETTING, must_exist=True
    )
    print(write_pool_report(settings))
    return 0


# Settings an export takes from its flags: a bad value is reported under the flag's name.
EXPORT_FLAGS = {
    "store_dir": ("--store", "store"),
    "export_val_fraction": ("--val-fraction", "val_fraction"),
    "export_test_fraction": ("--test-fraction", "test_fraction"),
    "export_seed": ("--seed", "seed"),
    "export_sources": ("--sources", "sources"),
    "export_max_staleness": ("--max-staleness", "max_staleness"),
}


def _export_settings(args: argparse.Namespace) -> Settings:
    """The export's settings; a bad value raises one line naming its flag (or variable)."""
    from pydantic import ValidationError

    from ..core import StatepoolError
    from ..core.export import ExportOptions, SourceOptions

    given = {field: getattr(args, attr) for field, (_, attr) in EXPORT_FLAGS.items()}
    try:
        settings = Settings.from_env(**given)
        ExportOptions.from_settings(settings)
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
    try:
        SourceOptions.from_settings(settings)
    except ValidationError as exc:
        name = "--sources" if args.sources is not None else Settings.env_name("export_sources")
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise StatepoolError(f"{name}: {message}") from None
    return settings


def cmd_export(args: argparse.Namespace) -> int:
    """Write one trainer-ready export of the store, streaming; reads files only, never Dagster."""
    from ..core import StatepoolError, absolute, as_path, is_local
    from ..core.export import (
        ExportOptions,
        ExportRefused,
        ExportSet,
        SourceOptions,
        check_target,
        empty_train_problem,
        stream_export,
    )
    from ..core.feedback import SelectionOptions
    from . import preflight

    settings = _export_settings(args)
    try:
        selection = SelectionOptions.from_args(args, SelectionOptions.from_settings(settings))
    except ValueError as exc:
        raise StatepoolError(str(exc)) from None
    store_name = "--store" if args.store else preflight.STORE_SETTING
    preflight.store_folder(settings.store_dir, store_name, must_exist=True)
    lengths = None
    if args.tokenizer is not None or args.max_prompt_tokens is not None:
        from ..core.export import LengthFilter, load_counter

        lengths = LengthFilter(load_counter(args.tokenizer), args.max_prompt_tokens)
    try:
        target = check_target(args.format, args.out, args.force)
    except StatepoolError as exc:
        raise StatepoolError(f"--out: {exc}") from None
    if is_local(target) and not args.parents and not target.parent.is_dir():
        # A typo in a path would otherwise become a new tree of folders.
        raise StatepoolError(
            f"--out: the folder {target.parent} does not exist (--parents creates it)"
        )
    only = _as_of(settings.store_dir, args.as_of) if args.as_of else None
    empty = "empty"
    finished: list[ExportSet] = []

    def check(export: ExportSet) -> None:
        finished.append(export)
        if not export.collected:
            raise ExportRefused(empty)
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
            raise ExportRefused(f"{flags or 'the split settings'}: {problem}")

    try:
        export = stream_export(
            settings.store_dir,
            {args.format: args.out},
            ExportOptions.from_settings(settings),
            force=args.force,
            lengths=lengths,
            check=check,
            sources=SourceOptions.from_settings(settings),
            selection=selection,
            only=only,
        )
    except ExportRefused as refused:
        if str(refused) != empty:
            raise StatepoolError(str(refused)) from None
        for problem in finished[0].problems:
            print(problem, file=sys.stderr)
        print(
            f"statepool export: {store_name}: store {settings.store_dir} holds no materialized "
            "run or session: nothing to export (`statepool sync` first)",
            file=sys.stderr,
        )
        return 1
    for problem in export.problems:
        print(problem, file=sys.stderr)
    out = str(absolute(as_path(args.out)))
    summary = {"format": args.format, "out": out, **export.summary()}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        rows = ", ".join(f"{split} {n}" for split, n in summary["rows"].items())
        runs = ", ".join(f"{split} {len(r)}" for split, r in summary["runs"].items())
        line = f"{args.format} export in {summary['out']}: rows {rows}; runs {runs}"
        if "sessions" in summary:
            line += "; sessions " + ", ".join(
                f"{split} {len(n)}" for split, n in summary["sessions"].items()
            )
        print(line)
        if export.duplicates_dropped:
            print(f"{plural(export.duplicates_dropped, 'duplicate state')} left out (see above)")
        if export.prompt_lengths is not None:
            lengths_seen = export.prompt_lengths
            print(
                f"prompt tokens ({lengths_seen['method']}): longest {lengths_seen['longest']}, "
                f"median {lengths_seen['median']}; {len(lengths_seen['left_out'])} over the "
                "limit left out"
            )
    return 0


def _as_of(store: str, version: str) -> frozenset[str]:
    """The states of a pool version (``--as-of``); those gone or changed since, told."""
    from ..core import StatepoolError
    from ..live import LivePool
    from ..live.versions import VersionGone

    quiet = logging.getLogger("statepool_dagster.live")
    level, quiet.level = quiet.level, logging.ERROR  # what changed is told below, once
    try:
        pool = LivePool(store, as_of=version)
    except (VersionGone, ValueError) as exc:
        raise StatepoolError(f"--as-of: {exc}") from None
    finally:
        quiet.level = level
    told = (
        ("no longer in the pool", pool.missing_since),
        ("changed since (exported as they are now)", pool.changed_since),
    )
    for what, states in told:
        if states:
            shown = ", ".join(states[:5]) + (", …" if len(states) > 5 else "")
            print(f"statepool export: --as-of {version}: {len(states)} states {what}: {shown}",
                  file=sys.stderr)  # fmt: skip
    return frozenset(pool.as_of.state_ids)


def cmd_score(args: argparse.Namespace) -> int:
    """Grade a completions file against the store's states; reads files only, never Dagster."""
    from ..core import StatepoolError
    from ..core.rewards import Grader, score_completions, score_table, store_states
    from . import preflight

    settings = Settings.from_env(store_dir=args.store)
    name = "--store" if args.store else preflight.STORE_SETTING
    preflight.store_folder(settings.store_dir, name, must_exist=True)
    grader = Grader.from_settings(settings)
    states, problems = store_states(settings.store_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not states:
        print(
            f"statepool score: {name}: store {settings.store_dir} holds no states "
            "(`statepool sync` first)",
            file=sys.stderr,
        )
        return 2
    try:
        report = score_completions(args.completions, states, grader)
    except StatepoolError as exc:
        raise StatepoolError(f"--completions: {exc}") from None
    report.store_problems = problems
    for bad in report.bad_lines:
        print(f"statepool score: {bad}", file=sys.stderr)
    for sid, lines in report.unknown_states.items():
        where = ", ".join(str(n) for n in lines)
        print(
            f"statepool score: {args.completions} line {where}: unknown state id {sid!r}",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(score_table(report))
    return 0 if report.complete else 1
