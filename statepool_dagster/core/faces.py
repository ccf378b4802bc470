"""How a core package shows its face: the names it lists, each imported on first use."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(
    package: str, public: list[str], names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``, from its modules' names (space-separated).

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
        value = getattr(importlib.import_module(f".{where[name]}", package), name)
        setattr(sys.modules[package], name, value)  # asked once: later lookups skip this
        return value

    def __dir__() -> list[str]:  # the lazy names too, for dir() and completion
        return sorted({*vars(sys.modules[package]), *public})

    return __getattr__, __dir__
