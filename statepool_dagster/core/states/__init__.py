"""Checkpoint states: the join of snapshots and episode batches, reference ops.

The face: what identifies a state for de-duplication (its digests).
"""

from __future__ import annotations

from ..faces import lazy_face

__all__ = ["state_digest_hex", "state_text_digest"]

# On first use: the core's own modules import this package's modules one by one.
__getattr__, __dir__ = lazy_face(
    __name__, __all__, {"digest": "state_digest_hex state_text_digest"}
)
