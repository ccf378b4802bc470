"""The one error type the core raises on bad input or bad configuration."""

from __future__ import annotations


class StatepoolError(Exception):
    """A problem with a run's files or with the pipeline's settings, named precisely."""


class BadRecordError(StatepoolError):
    """A record that could not be used, raised in strict mode (``on_bad_record=fail``)."""


class PromptInputError(StatepoolError):
    """A state whose prompt cannot be rendered (a card's ``trigger`` that is not text, …).

    The state itself is kept, as the original keeps it (it fails only when rendering);
    the prompts stage catches this per state and sets the prompt aside as a reject.
    """
