"""Every setting of the pipeline in one place: its environment variable and its default.

Read at run time (never at import), so tests and the UI's run config can change them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .names import LAST_STDS, SCORE_RANGE
from .prompts.spec import PromptLimits, PromptSpec
from .scales import band_problem
from .states.join import Followup, Pairing

ENV_PREFIX = "STATEPOOL_"


class Settings(BaseModel):
    """The pipeline's settings; each field ``x`` is read from ``STATEPOOL_X``."""

    model_config = ConfigDict(frozen=True)

    runs_dir: str = Field(
        "./runs", description="Folder (or fsspec URL) holding one sub-folder per run."
    )
    store_dir: str = Field(
        "./store", description="Root of the asset store (Parquet + JSON): a folder or fsspec URL."
    )
    sessions_dir: str = Field(
        "./sessions",
        description="Folder (or fsspec URL) of sessions: states rollout workers write as they run.",
    )
    dataset: str = Field("ovo", description="Value of every state's `dataset` field.")
    prompt_template: str | None = Field(
        None, description="Curator template: `module:attr` or a text file. Default: bundled."
    )
    param_rule: str | None = Field(
        None, description="Parameter rule: `module:attr` or a text file. Default: bundled."
    )
    tool_specs: str | None = Field(
        None, description="Tool specs: `module:attr` or a JSON/YAML file. Default: bundled."
    )
    episode_formatter: str | None = Field(
        None, description="Episode formatter: `module:func` or `file.py:func`. Default: bundled."
    )
    trigger_chars: int = Field(150, ge=0, description="Trigger text cut in the catalog.")
    program_chars: int = Field(200, ge=0, description="Program text cut in the catalog.")
    analysis_chars: int = Field(4000, ge=0, description="Analysis block cut.")
    episodes_chars: int = Field(5000, ge=0, description="Raw-episodes block cut.")
    max_ops: int = Field(3, ge=0, description="Operations the curator may propose.")
    on_bad_record: Literal["keep", "fail"] = Field(
        "keep", description="`keep` sets bad records aside; `fail` fails the partition."
    )
    pairing: Pairing = Field(
        "seed",
        description="`seed`: library k with batch k-1 (else k); "
        "`pre_curation`: checkpoint k gets library k-1 and the batch run under it.",
    )
    followup: Followup = Field(
        "none",
        description="Fill followup_qids/gt_map: `none`, `batch` (the state's own batch) or "
        "`next_batch` (the batch run under library k, after curation).",
    )
    export_val_fraction: float = Field(
        0.1, ge=0, le=1, description="Share of runs in the exports' val split."
    )
    export_test_fraction: float = Field(
        0.0, ge=0, le=1, description="Share of runs in the exports' test split (0: no test split)."
    )
    export_seed: int = Field(0, description="Seed of the exports' run-level split.")
    keep_versions: int = Field(
        100, ge=1, description="Live-pool versions (what trainer checkpoints name) always kept."
    )
    keep_version_days: float = Field(
        30.0, ge=0, description="Live-pool versions younger than this many days are kept too."
    )
    export_sources: str = Field(
        "runs,sessions",
        description="What the exports read: `runs`, `sessions` or `runs,sessions`.",
    )
    export_max_staleness: int | None = Field(
        None,
        ge=0,
        description="Exports keep only session states at most this many policy steps behind "
        "their session's newest (states without a step are then left out). Default: all.",
    )
    ops_parser: str | None = Field(
        None,
        description="Parser of curator answers into ops: `module:function`. Default: bundled.",
    )
    outcome_scorer: str | None = Field(
        None,
        description="Outcome hook `module:function(next_library, state) -> float`, "
        "weighted into the reward. Default: none.",
    )
    reward_agreement_weight: float = Field(
        1.0, ge=0, description="Weight of the agreement with the reference ops in the reward."
    )
    reward_validity_weight: float = Field(
        0.2, ge=0, description="Weight of the share of valid ops in the reward."
    )
    reward_outcome_weight: float = Field(
        1.0, ge=0, description="Weight of the outcome hook's value (when a hook is set)."
    )
    reward_format_error: float = Field(
        SCORE_RANGE[0],
        ge=SCORE_RANGE[0],
        le=0,
        description="Reward of an answer with no well-formed list of ops (the score scale's "
        "bottom is -1).",
    )
    feedback_dir: str | None = Field(
        None,
        description="Folder (or fsspec URL) where reward functions record feedback segments "
        "(off when unset); `statepool feedback` and `state_stats` default to <store>/feedback.",
    )
    feedback_seal_seconds: float = Field(
        30.0, gt=0, description="A reward worker's feedback segment is sealed this old."
    )
    feedback_group_seconds: float = Field(
        120.0,
        ge=0,
        description="verl's compute_score: one state's answers within this window form a group.",
    )
    select_drop_zero_variance: int | None = Field(
        None,
        ge=1,
        le=LAST_STDS,
        description="Serve no state whose last K feedback groups all had zero std (K: 1 to 16).",
    )
    select_band_on: Literal["match", "score"] = Field(
        "match", description="What the difficulty band reads: the ops-match rate or the score."
    )
    select_difficulty_band: str | None = Field(
        None,
        description="`LO,HI`: serve states whose mean ops-match rate (0 to 1) or score (-1 to 1) "
        "is in it.",
    )
    select_weight: Literal["std", "pass-rate"] | None = Field(
        None, description="A weight per state: recent groups' reward std, or p(1-p) of matches."
    )
    workers: int = Field(
        0, ge=0, description="Processes for a run covering several partitions (0: one per core)."
    )
    sensor_interval: int = Field(
        30, ge=1, description="Seconds between sensor ticks. Read when the code location loads."
    )
    settle_seconds: float = Field(
        10.0, ge=0, description="A run is requested once its files are this many seconds old."
    )
    executor: Literal["in_process", "celery"] = Field(
        "in_process",
        description="How runs execute their steps: `in_process` (one process) or `celery` "
        "(each step a task for the Celery workers). Read when the code location loads.",
    )
    celery_broker: str | None = Field(
        None,
        validate_default=True,
        description="Celery broker URL, e.g. redis://host:6379/0 (executor `celery`).",
    )
    celery_backend: str | None = Field(
        None, description="Celery result backend URL (default: the broker's URL)."
    )

    @field_validator("celery_broker", "celery_backend", mode="after")
    @classmethod
    def _celery_url(cls, url: str | None, info: ValidationInfo) -> str | None:
        if url is not None and "://" not in url:
            raise ValueError(f"not a URL: {url!r} (e.g. redis://127.0.0.1:6379/0)")
        if info.field_name == "celery_broker" and not url and info.data.get("executor") == "celery":
            raise ValueError(f"required when {cls.env_name('executor')}=celery")
        return url

    @field_validator("select_difficulty_band", mode="after")
    @classmethod
    def _band(cls, band: str | None, info: ValidationInfo) -> str | None:
        if band is None:
            return None
        try:
            lo, hi = (float(x) for x in band.replace(",", " ").split())
        except ValueError:
            raise ValueError(f"{band!r}: two numbers, LO,HI") from None
        problem = band_problem(lo, hi, info.data.get("select_band_on", "match"))
        if problem:
            raise ValueError(f"{band!r}: {problem}")
        return band

    @classmethod
    def env_name(cls, field: str) -> str:
        return ENV_PREFIX + field.upper()

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        only: tuple[str, ...] | None = None,
        **overrides: object,
    ) -> Settings:
        """Settings from the environment; explicit ``overrides`` (not ``None``) win. With
        ``only``, the other fields keep their defaults (a bad value there is not read)."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in only or cls.model_fields:
            raw = environ.get(cls.env_name(name))
            if raw not in (None, ""):
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)

    @classmethod
    def describe_error(cls, error: ValidationError) -> str:
        """A settings error in one line: the variable, then what is wrong with it."""
        first = error.errors()[0]
        name = cls.env_name(str(first["loc"][0])) if first["loc"] else "a setting"
        return f"{name}: {first['msg'].removeprefix('Value error, ')}"

    @property
    def strict(self) -> bool:
        return self.on_bad_record == "fail"

    def prompt_limits(self) -> PromptLimits:
        return PromptLimits(
            trigger_chars=self.trigger_chars,
            program_chars=self.program_chars,
            analysis_chars=self.analysis_chars,
            episodes_chars=self.episodes_chars,
            max_ops=self.max_ops,
        )

    def prompt_spec(self) -> PromptSpec:
        """Load the four prompt inputs this configuration names (fails clearly if one is bad)."""
        return PromptSpec.load(
            template=self.prompt_template,
            param_rule=self.param_rule,
            tool_specs=self.tool_specs,
            episode_formatter=self.episode_formatter,
            limits=self.prompt_limits(),
        )


def settings_key() -> tuple[tuple[str, str], ...]:
    """The ``STATEPOOL_*`` variables now set: what settings read now (and a cached grade)
    depend on."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX)))


@lru_cache(maxsize=64)
def _validated(only: tuple[str, ...], values: tuple[str | None, ...]) -> Settings:
    environ = {Settings.env_name(f): v for f, v in zip(only, values, strict=True) if v is not None}
    return Settings.from_env(environ, only=only)


def settings_now(*only: str) -> Settings:
    """The settings ``only`` names, from the environment as it is now; the others keep their
    defaults. Validated once per distinct value: cheap enough for every reward call."""
    return _validated(only, tuple(os.environ.get(Settings.env_name(f)) for f in only))
