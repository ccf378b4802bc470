"""Settings as a Dagster resource, made from :class:`~statepool_dagster.core.config.Settings`.

Every field of ``Settings`` is a field of the resource, of the same name and description
(the UI's launchpad shows them), none declared twice: set in the run config it wins, left
empty it is read from its ``STATEPOOL_*`` variable when the run starts. Assets, checks,
the export and the sensors take it as a resource parameter (``statepool``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from dagster import ConfigurableResource, Definitions, definitions
from pydantic import Field, create_model

from ..core.config import Settings
from ..core.names import SETTINGS
from ..core.prompts.spec import PromptSpec

_PLAIN = (bool, int, float)


def _config_type(annotation: Any) -> type:
    """The field's type as Dagster's config takes it: numbers as such, anything else text
    (choices and paths are checked by ``Settings`` when read)."""
    kinds = [a for a in (get_args(annotation) or (annotation,)) if a is not type(None)]
    return kinds[0] if len(kinds) == 1 and kinds[0] in _PLAIN else str


def _description(name: str) -> str:
    field = Settings.model_fields[name]
    default = "unset" if field.default is None else repr(field.default)
    return f"{Settings.env_name(name)} (default {default}). {field.description}"


class _Reading(ConfigurableResource):
    """Where runs are read from and how states and prompts are built.

    Every field left empty is read from its ``STATEPOOL_*`` environment variable when a run
    starts (the settings reference lists them, with their defaults).
    """

    def settings(self, environ: Mapping[str, str] | None = None) -> Settings:
        """The fields set here, the rest from ``environ`` (default: the process environment)."""
        return Settings.from_env(environ, **self.model_dump())

    def prompt_spec(self) -> PromptSpec:
        return self.settings().prompt_spec()


StatepoolSettings = create_model(
    "StatepoolSettings",
    __base__=_Reading,
    __module__=__name__,
    __doc__=_Reading.__doc__,
    **{
        name: (
            _config_type(field.annotation) | None,
            Field(None, description=_description(name)),
        )
        for name, field in Settings.model_fields.items()
    },
)


@definitions
def settings_resource() -> Definitions:
    """The settings resource every asset, check and sensor takes, under its key."""
    return Definitions(resources={SETTINGS: StatepoolSettings()})
