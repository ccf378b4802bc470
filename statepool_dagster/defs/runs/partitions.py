"""The dynamic partitions of runs: one per run folder."""

from dagster import DynamicPartitionsDefinition

from ...core.names import RUNS

runs_partitions = DynamicPartitionsDefinition(name=RUNS)

__all__ = ["RUNS", "runs_partitions"]
