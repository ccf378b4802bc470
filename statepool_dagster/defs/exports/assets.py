"""The trainer's dataset: every run's states as verl and TRL Parquet and as a flat state pool."""

from pathlib import Path

from dagster import (
    AssetExecutionContext,
    AutomationCondition,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from ...core.export.collect import empty_train_problem
from ...core.export.rows import FORMATS, ExportOptions, ExportSet, SourceOptions
from ...core.export.write import stream_export
from ...core.feedback.select import SelectionOptions
from ...core.names import GROUP, PROMPTS, ROW_COUNT, SESSION_PROMPTS, STATE_STATS, STATES
from ...core.report import write_report
from ...core.store.layout import StoreLayout
from ..resources import StatepoolSettings

# eager() waits until no upstream partition is missing: one failed or never-built run
# would then hold back the export for every other run, so that clause is dropped.
EXPORT_CONDITION = (
    AutomationCondition.eager()
    .without(~AutomationCondition.any_deps_missing())
    .with_label("eager_allow_missing")
)


@asset(
    # Sessions' prompts and the feedback statistics count as changes too: the export is
    # rebuilt once a session segment is built or state_stats is folded.
    deps=[STATES, PROMPTS, SESSION_PROMPTS, STATE_STATS],
    group_name=GROUP,
    kinds={"python", "parquet", "json"},
    automation_condition=EXPORT_CONDITION,
)
def training_dataset(
    context: AssetExecutionContext, statepool: StatepoolSettings
) -> MaterializeResult:
    """Every run's and session's states, ready for a trainer: exports/verl/, exports/trl/
    and exports/pool/.

    verl and TRL Parquet per split (train, val, optional test; split by run, never
    dividing one), each row with the rendered prompt, the state and its reference ops;
    pool/ holds one <state_id>.json per state, as the original script writes them.
    Identical states appear once: the earliest run by name keeps them, and a run state wins
    over the same state from a session. Sessions are split by session name; with sessions,
    rows carry source, session and policy_step. STATEPOOL_EXPORT_SOURCES and
    STATEPOOL_EXPORT_MAX_STALENESS choose the states, STATEPOOL_SELECT_* leave out (and
    weigh) states by their state_stats, each left-out state named. The store is read
    once, a batch of checkpoints at a time, and the three formats written as it is read.
    Rebuilt whenever a run's states or prompts, a session's prompts or state_stats change;
    also writes the pool report,
    report/index.html.
    """
    settings = statepool.settings()
    layout = StoreLayout(settings.store_dir)
    export = stream_export(
        layout.root,
        {fmt: layout.exports() / fmt for fmt in FORMATS},
        ExportOptions.from_settings(settings),
        check=_train_not_empty,
        sources=SourceOptions.from_settings(settings),
        selection=SelectionOptions.from_settings(settings),
    )
    for problem in export.problems:
        context.log.warning(problem)
    report = write_report(layout.root, export=export, runs_dir=settings.runs_dir)
    counts = export.counts()
    summary = export.summary()
    metadata = {
        ROW_COUNT: export.total,
        **{f"rows_{split}": n for split, n in counts.items()},
        "runs_by_split": MetadataValue.json(summary["runs"]),
        "sessions_by_split": MetadataValue.json(summary.get("sessions", {})),
        "duplicates_dropped": export.duplicates_dropped,
        "problems": len(export.problems),
        "problem_details": MetadataValue.md(problems_markdown(export.problems)),
        "exports": MetadataValue.path(str(layout.exports())),
        "report": MetadataValue.path(str(report)),
    }
    if report_url := _file_url(report):
        metadata["report_link"] = MetadataValue.url(report_url)
    return MaterializeResult(metadata=metadata)


def _train_not_empty(export: ExportSet) -> None:
    """Refuses (keeping the earlier exports) an export whose fractions leave train empty."""
    empty_train = empty_train_problem(export)
    if empty_train:
        raise Failure(description=f"{empty_train} (STATEPOOL_EXPORT_VAL/TEST_FRACTION)")


def problems_markdown(problems: list[str]) -> str:
    """The export's problems as a Markdown list the UI shows as text."""
    if not problems:
        return "_none_"
    return "\n".join("- " + p.replace("\n", " ").replace("*", "\\*") for p in problems)


def _file_url(path: object) -> str | None:
    return path.resolve().as_uri() if isinstance(path, Path) else None
