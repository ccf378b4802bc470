"""One dynamic partition per run folder."""

from dagster import DynamicPartitionsDefinition

RUNS = "runs"

runs_partitions = DynamicPartitionsDefinition(name=RUNS)
