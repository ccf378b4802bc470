"""The export's automation: ``training_dataset`` rebuilt once its upstream changed."""

from dagster import AssetSelection, AutomationConditionSensorDefinition, DefaultSensorStatus

from .assets import training_dataset

# Dagster's implicit default_automation_condition_sensor starts stopped; this one is on.
export_automation_sensor = AutomationConditionSensorDefinition(
    "training_dataset_automation",
    target=AssetSelection.assets(training_dataset),
    default_status=DefaultSensorStatus.RUNNING,
    # A sealed segment reaches training_dataset after the sessions sensor's tick, the
    # session's build, this sensor's tick and the export's run: both sensors tick fast.
    minimum_interval_seconds=15,
    description="Rebuilds training_dataset once run or session partitions (or state_stats) "
    "changed and none is in progress.",
)
