"""The four inference-side inputs of the curator prompt, and where to load them from.

Each input is given as ``package.module:attr`` (imported) or a file path (text for
the template and the parameter rule; JSON or YAML for the tool specs; a ``.py``
file with ``:function`` for the formatter). With nothing given, the bundled
defaults in ``defaults/`` are used.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import StatepoolError, UserCodeError, call_user
from .template import (
    PLACEHOLDERS,
    format_episodes,
    surrogate_problem,
    template_problems,
    tool_specs_text,
)

DEFAULTS_DIR = Path(__file__).parent / "defaults"
_IMPORT_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")

EpisodeFormatter = Callable[[list[dict[str, Any]]], str]


class PromptLimits(BaseModel):
    """Truncation limits and the op budget; the defaults are the original script's."""

    model_config = ConfigDict(frozen=True)

    trigger_chars: int = Field(150, ge=0)
    program_chars: int = Field(200, ge=0)
    analysis_chars: int = Field(4000, ge=0)
    episodes_chars: int = Field(5000, ge=0)
    max_ops: int = Field(3, ge=0)


class PromptSpec(BaseModel):
    """Template, parameter rule, tool specs and episode formatter, plus limits."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    template: str
    param_rule: str
    tool_specs: dict[str, dict[str, Any]]
    episode_formatter: EpisodeFormatter
    limits: PromptLimits = PromptLimits()

    @field_validator("template")
    @classmethod
    def _known_placeholders(cls, template: str) -> str:
        problems = template_problems(template)
        if problems:
            known = ", ".join(PLACEHOLDERS)
            raise ValueError(f"curator template: {'; '.join(problems)} (known: {known})")
        return template

    @field_validator("tool_specs")
    @classmethod
    def _described(cls, specs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, spec in specs.items():
            if "description" not in spec:
                raise ValueError(f"tool spec {name!r} has no 'description'")
        return specs

    @model_validator(mode="after")
    def _fields_can_render(self) -> PromptSpec:
        fixed = {
            "tool_specs": tool_specs_text(self.tool_specs),
            "param_rule": self.param_rule,
            "max_ops": self.limits.max_ops,
        }
        texts = [("curator template", self.template), ("param rule", self.param_rule)]
        for what, text in [*texts, ("tool specs", fixed["tool_specs"])]:
            problem = surrogate_problem(text)  # every prompt would have it: none is storable
            if problem:
                raise ValueError(f"{what}: {problem}")
        problems = template_problems(self.template, fixed)
        if problems:
            raise ValueError(f"curator template: {'; '.join(problems)}")
        return self

    @classmethod
    def load(
        cls,
        template: str | None = None,
        param_rule: str | None = None,
        tool_specs: str | None = None,
        episode_formatter: str | None = None,
        limits: PromptLimits | None = None,
    ) -> PromptSpec:
        """Build a spec from references (import paths or files); ``None`` means the default."""
        try:
            if template is param_rule is tool_specs is episode_formatter is None:
                return _bundled_spec(limits or PromptLimits())  # package files: built once
            return cls(
                template=load_text(template, "curator_prompt.txt", "prompt template"),
                param_rule=load_text(param_rule, "param_rule.txt", "param rule"),
                tool_specs=load_tool_specs(tool_specs),
                episode_formatter=load_formatter(episode_formatter),
                limits=limits or PromptLimits(),
            )
        except ValidationError as exc:  # one line, the setting's own words
            messages = [e["msg"].removeprefix("Value error, ") for e in exc.errors()]
            raise StatepoolError("; ".join(messages)) from None
        except ValueError as exc:
            raise StatepoolError(str(exc)) from None


def _said(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"


def _import_attr(ref: str, what: str) -> Any:
    module_name, _, attr_path = ref.partition(":")
    try:
        obj: Any = call_user(importlib.import_module, module_name)
    except UserCodeError as error:  # a SyntaxError, or what the module's top level raises
        raise StatepoolError(
            f"{what}: cannot import {module_name!r} from {ref!r}: {_said(error.raised)}"
        ) from None
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise StatepoolError(
                f"{what}: {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return obj


def _resolve(ref: str, what: str) -> tuple[str, Any]:
    """``("file", Path)`` or ``("import", object)`` for a reference."""
    path = Path(ref).expanduser()
    if path.is_file():
        return "file", path
    if _IMPORT_REF.fullmatch(ref):
        return "import", _import_attr(ref, what)
    raise StatepoolError(f"{what}: {ref!r} is neither an existing file nor a module:attr path")


def read_text_file(path: Path, what: str) -> str:
    """A file's text as a module would hold it written there as a literal.

    UTF-8; a leading BOM is dropped and ``\\r\\n`` and ``\\r`` read as ``\\n``, as Python
    reads source. Everything else, a final newline included, is kept.
    """
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StatepoolError(f"{what}: {path} is not UTF-8 text: {exc}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


@lru_cache(maxsize=8)
def bundled_text(name: str) -> str:
    """A bundled default file's text (read once: the package's files do not change)."""
    return (DEFAULTS_DIR / name).read_text(encoding="utf-8")


def load_text(ref: str | None, default_file: str, what: str) -> str:
    """A template or rule: bundled default, a text file, or an imported string."""
    if ref is None:
        return bundled_text(default_file)
    kind, value = _resolve(ref, what)
    if kind == "file":
        return read_text_file(value, what)
    if not isinstance(value, str):
        raise StatepoolError(f"{what}: {ref!r} is a {type(value).__name__}, not a str")
    return value


def load_tool_specs(ref: str | None) -> dict[str, dict[str, Any]]:
    """Tool specs: bundled default, a JSON/YAML file, or an imported mapping."""
    if ref is None:
        return json.loads(bundled_text("tool_specs.json"))
    kind, value = _resolve(ref, "tool specs")
    if kind == "file":
        text = read_text_file(value, "tool specs")
        if value.suffix.lower() in (".yaml", ".yml"):
            import yaml

            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise StatepoolError(f"tool specs: {ref} is not valid YAML: {exc}") from None
        else:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise StatepoolError(f"tool specs: {ref} is not valid JSON: {exc}") from None
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise StatepoolError(f"tool specs: {ref!r} is not a mapping of name -> spec")
    return {str(k): dict(v) for k, v in value.items()}


def load_formatter(ref: str | None) -> EpisodeFormatter:
    """The episode formatter: bundled default, ``module:function`` or ``file.py:function``."""
    if ref is None:
        return format_episodes
    file_part, sep, func = ref.rpartition(":")
    if sep and file_part.endswith(".py") and Path(file_part).is_file():
        spec = importlib.util.spec_from_file_location(Path(file_part).stem, file_part)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        try:
            call_user(spec.loader.exec_module, module)
        except UserCodeError as error:  # the user's file, as for an import
            raise StatepoolError(
                f"episode formatter: cannot load {file_part}: {_said(error.raised)}"
            ) from None
        value = getattr(module, func, None)
    elif _IMPORT_REF.fullmatch(ref):
        value = _import_attr(ref, "episode formatter")
    else:
        raise StatepoolError(
            f"episode formatter: {ref!r} is neither module:function nor file.py:function"
        )
    if not callable(value):
        raise StatepoolError(f"episode formatter: {ref!r} is not callable")
    return value


@lru_cache(maxsize=8)
def _bundled_spec(limits: PromptLimits) -> PromptSpec:
    return PromptSpec(
        template=bundled_text("curator_prompt.txt"),
        param_rule=bundled_text("param_rule.txt"),
        tool_specs=load_tool_specs(None),
        episode_formatter=format_episodes,
        limits=limits,
    )


@lru_cache(maxsize=8)
def default_prompt_spec() -> PromptSpec:
    """The bundled spec (cached: it is read from package files)."""
    return PromptSpec.load()
