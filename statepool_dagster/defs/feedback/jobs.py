"""The job that folds new feedback segments into ``state_stats``."""

from dagster import define_asset_job

from ...core.names import STATE_STATS_JOB
from .assets import state_stats

state_stats_job = define_asset_job(STATE_STATS_JOB, selection=[state_stats])
