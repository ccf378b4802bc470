"""How a core package shows its face: the names it lists, each imported on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(package: str, public: list[str], names: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__``, from each of its modules' names (space-separated).

    A name is imported only when asked for, so asking a package for one light name never
    loads what its other modules import (Arrow, the writers, the settings' prompt spec).
    Every name given must be in the package's ``public`` (its ``__all__``).
    """
    where = {name: module for module, listed in names.items() for name in listed.split()}
    if unlisted := sorted(set(where) - set(public)):
        raise ValueError(f"{package} gives names its __all__ does not list: {unlisted}")

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f".{where[name]}", package), name)

    return __getattr__
