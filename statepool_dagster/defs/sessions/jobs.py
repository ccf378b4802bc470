"""The job that builds a session's new sealed segments into states and prompts."""

from dagster import AssetSelection, define_asset_job

from ...core.names import SESSIONS_JOB
from .assets import session_assets

sessions_job = define_asset_job(
    SESSIONS_JOB,
    selection=AssetSelection.assets(session_assets),
    description="Build a session's new sealed segments into states and prompts, then check them.",
)
