"""The curator prompt: its inference-side inputs, rendered as inference does.

The face: ``PromptSpec``, the four inputs and where they are loaded from.
"""

from __future__ import annotations

from ..faces import lazy_face

__all__ = ["PromptSpec"]

# On first use: the settings import this package's spec, and the spec this package.
__getattr__, __dir__ = lazy_face(__name__, __all__, {"spec": "PromptSpec"})
