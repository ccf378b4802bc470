"""What the ``statepool`` commands check before any work.

Each bad path or value is one line naming the setting or flag to fix; the command then
exits 2 (``cli.main`` turns a :class:`StatepoolError` into that line).
"""

from __future__ import annotations

import os

from ..core import AnyPath, Settings, StatepoolError, as_path

RUNS_SETTING = Settings.env_name("runs_dir")
STORE_SETTING = Settings.env_name("store_dir")


def use_store_flag(args) -> str:
    """A command's ``--store``, for the Dagster runs it starts too (they read the settings from
    the environment); the name a refusal of the store names."""
    if getattr(args, "store", None):
        os.environ[STORE_SETTING] = args.store
        return "--store"
    return STORE_SETTING


def _kind_problem(path: AnyPath, name: str, what: str) -> str | None:
    try:
        if path.exists() and not path.is_dir():
            return f"{name}: {path} is a file, not a {what} folder"
    except OSError as exc:
        return f"{name}: {path} is unreadable ({exc})"
    return None


def runs_folder(settings: Settings, create: bool = False) -> AnyPath:
    """The runs folder; it must exist unless ``create`` (the demo makes it)."""
    path = as_path(settings.runs_dir)
    problem = _kind_problem(path, RUNS_SETTING, "runs")
    if problem:
        raise StatepoolError(problem)
    if not create and not path.exists():
        raise StatepoolError(f"{RUNS_SETTING}: runs folder {path} does not exist")
    return path


def store_folder(store: str, name: str = STORE_SETTING, must_exist: bool = False) -> AnyPath:
    """The store root; ``must_exist`` for commands that only read it (export, status)."""
    path = as_path(store)
    problem = _kind_problem(path, name, "store")
    if problem:
        raise StatepoolError(problem)
    if must_exist and not path.exists():
        raise StatepoolError(
            f"{name}: store {path} does not exist (`statepool sync` or `statepool demo` makes it)"
        )
    return path


_PROMPT_SETTINGS = {
    "curator template": "prompt_template",
    "prompt template": "prompt_template",
    "param rule": "param_rule",
    "tool spec": "tool_specs",
    "episode formatter": "episode_formatter",
}


def prompt_spec(settings: Settings) -> None:
    """The four prompt inputs load, and the template can fill some state.

    Checked before any run: a bad one would otherwise fail every run the same way.
    """
    try:
        settings.prompt_spec()
    except StatepoolError as exc:
        message = str(exc)
        field = next((f for p, f in _PROMPT_SETTINGS.items() if message.startswith(p)), None)
        if field is None:
            raise
        raise StatepoolError(f"{Settings.env_name(field)}: {message}") from None
