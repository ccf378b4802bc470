"""The export's automation: ``training_dataset`` rebuilt once its upstream changed."""

from dagster import AssetSelection, AutomationConditionSensorDefinition, DefaultSensorStatus

from .assets import training_dataset

# Dagster's implicit default_automation_condition_sensor starts stopped; this one is on.
export_automation_sensor = AutomationConditionSensorDefinition(
    "training_dataset_automation",
    target=AssetSelection.assets(training_dataset),
    default_status=DefaultSensorStatus.RUNNING,
    # A sealed segment reaches training_dataset within 90 s: sessions tick (15 s), the
    # session's build, this tick (15 s), the export's run.
    minimum_interval_seconds=15,
    description="Rebuilds training_dataset once run or session partitions (or state_stats) "
    "changed and none is in progress.",
)
