"""The dynamic partitions: one per run folder, one per session folder."""

from dagster import DynamicPartitionsDefinition

from ..core.names import RUNS, SESSIONS_PARTITIONS

runs_partitions = DynamicPartitionsDefinition(name=RUNS)
sessions_partitions = DynamicPartitionsDefinition(name=SESSIONS_PARTITIONS)

__all__ = ["RUNS", "runs_partitions", "sessions_partitions"]
