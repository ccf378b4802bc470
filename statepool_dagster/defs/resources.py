"""Settings as a Dagster resource: unset fields fall back to ``STATEPOOL_*`` at run time.

Every part of the code location reads its settings through :class:`StatepoolSettings`:
the assets, checks and export (as a resource parameter), the store's IO manager (as a
required resource), the sensor, the executor choice and ``statepool sync`` (through
:data:`statepool_settings`, the instance the definitions bind).
"""

from collections.abc import Mapping

from dagster import ConfigurableResource
from pydantic import Field

from ..core.config import Settings
from ..core.prompts.spec import PromptSpec


class StatepoolSettings(ConfigurableResource):
    """Where runs are read from and how states and prompts are built.

    Every field left empty is read from its ``STATEPOOL_*`` environment variable
    when a run starts (defaults in the README's settings table).
    """

    runs_dir: str | None = Field(None, description="STATEPOOL_RUNS_DIR (default ./runs)")
    store_dir: str | None = Field(None, description="STATEPOOL_STORE_DIR (default ./store)")
    sessions_dir: str | None = Field(
        None, description="STATEPOOL_SESSIONS_DIR (default ./sessions)"
    )
    dataset: str | None = Field(None, description="STATEPOOL_DATASET (default ovo)")
    on_bad_record: str | None = Field(None, description="STATEPOOL_ON_BAD_RECORD: keep | fail")
    prompt_template: str | None = Field(None, description="STATEPOOL_PROMPT_TEMPLATE")
    param_rule: str | None = Field(None, description="STATEPOOL_PARAM_RULE")
    tool_specs: str | None = Field(None, description="STATEPOOL_TOOL_SPECS")
    episode_formatter: str | None = Field(None, description="STATEPOOL_EPISODE_FORMATTER")
    pairing: str | None = Field(None, description="STATEPOOL_PAIRING: seed | pre_curation")
    followup: str | None = Field(None, description="STATEPOOL_FOLLOWUP: none | batch | next_batch")
    export_val_fraction: float | None = Field(
        None, description="STATEPOOL_EXPORT_VAL_FRACTION (default 0.1)"
    )
    export_test_fraction: float | None = Field(
        None, description="STATEPOOL_EXPORT_TEST_FRACTION (default 0)"
    )
    export_seed: int | None = Field(None, description="STATEPOOL_EXPORT_SEED (default 0)")
    export_sources: str | None = Field(
        None, description="STATEPOOL_EXPORT_SOURCES (default runs,sessions)"
    )
    export_max_staleness: int | None = Field(
        None, description="STATEPOOL_EXPORT_MAX_STALENESS (default: keep all)"
    )

    def settings(self, environ: Mapping[str, str] | None = None) -> Settings:
        """The fields set here, the rest from ``environ`` (default: the process environment)."""
        return Settings.from_env(environ, **self.model_dump())

    def prompt_spec(self) -> PromptSpec:
        return self.settings().prompt_spec()


# The one instance the definitions bind, read directly where no run is at hand: the sensor's
# interval and the executor (both when the code location loads) and `statepool sync`.
statepool_settings = StatepoolSettings()
