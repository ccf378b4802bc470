"""The one error type the core raises on bad input or bad configuration, and the one place
it catches whatever a user's code raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class StatepoolError(Exception):
    """A problem with a run's files or with the pipeline's settings, named precisely."""


class BadRecordError(StatepoolError):
    """A record that could not be used, raised in strict mode (``on_bad_record=fail``)."""


class PromptInputError(StatepoolError):
    """A state whose prompt cannot be rendered (a card's ``trigger`` that is not text, …).

    The state itself is kept, as the original keeps it (it fails only when rendering);
    the prompts stage catches this per state and sets the prompt aside as a reject.
    """


class UserCodeError(Exception):
    """What a user's code raised (``raised``), whatever its type, caught by :func:`call_user`."""

    def __init__(self, raised: Exception) -> None:
        super().__init__(f"{type(raised).__name__}: {raised}")
        self.raised = raised


def call_user(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` for code the package does not own: a user's episode formatter,
    ops parser or outcome hook, a module or file a setting names, a model's chat template.

    Such code may raise any type, so whatever it raises comes back as one
    :class:`UserCodeError`, which each caller catches by type and reports as its own.
    """
    try:
        return function(*args)
    except Exception as exc:  # code we do not own raises any type; the caller reports it
        raise UserCodeError(exc) from exc
