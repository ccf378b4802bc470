"""The trainer's dataset: every run's states as verl and TRL Parquet and as a flat state pool."""

from dagster import (
    AssetExecutionContext,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    MaterializeResult,
    MetadataValue,
    asset,
)

from .assets import GROUP, checkpoint_states, curator_prompts
from .core.export.build import FORMATS, collect_export, write_export
from .core.store.files import StoreLayout
from .resources import StatepoolSettings

# eager() waits until no upstream partition is missing: one failed or never-built run
# would then hold back the export for every other run, so that clause is dropped.
EXPORT_CONDITION = (
    AutomationCondition.eager()
    .without(~AutomationCondition.any_deps_missing())
    .with_label("eager_allow_missing")
)


@asset(
    deps=[checkpoint_states, curator_prompts],
    group_name=GROUP,
    kinds={"python", "parquet", "json"},
    automation_condition=EXPORT_CONDITION,
)
def training_dataset(
    context: AssetExecutionContext, statepool: StatepoolSettings
) -> MaterializeResult:
    """Every run's states, ready for a trainer: exports/verl/, exports/trl/ and exports/pool/.

    verl and TRL Parquet per split (train, val, optional test; split by run, never
    dividing one), each row with the rendered prompt, the state and its reference ops;
    pool/ holds one <state_id>.json per state, as the original script writes them.
    Identical states appear once. Rebuilt whenever a run's states or prompts change.
    """
    settings = statepool.settings()
    layout = StoreLayout(settings.store_dir)
    export = collect_export(layout.root, settings.export_options())
    for fmt in FORMATS:
        write_export(export, fmt, layout.exports() / fmt)
    for problem in export.problems:
        context.log.warning(problem)
    counts = export.counts()
    summary = export.summary()
    metadata = {
        "dagster/row_count": len(export.rows),
        **{f"rows_{split}": n for split, n in counts.items()},
        "runs_by_split": MetadataValue.json(summary["runs"]),
        "duplicates_dropped": len(export.duplicates),
        "problems": len(export.problems),
        "exports": MetadataValue.path(str(layout.exports())),
    }
    return MaterializeResult(metadata=metadata)


# Dagster's implicit default_automation_condition_sensor starts stopped; this one is on.
export_automation_sensor = AutomationConditionSensorDefinition(
    "training_dataset_automation",
    target=AssetSelection.assets(training_dataset),
    default_status=DefaultSensorStatus.RUNNING,
    description="Rebuilds training_dataset once run partitions changed and none is in progress.",
)
