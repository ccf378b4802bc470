"""The dynamic partitions of sessions: one per session folder."""

from dagster import DynamicPartitionsDefinition

from ...core.names import SESSIONS_PARTITIONS

sessions_partitions = DynamicPartitionsDefinition(name=SESSIONS_PARTITIONS)
