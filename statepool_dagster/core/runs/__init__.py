"""Run folders: find, fingerprint and read their files, bad ones set aside.

The face: the run folders found and fingerprinted, their natural order, and which of them
to register and build (``plan_sync``, ``SyncPlan``).
"""

from __future__ import annotations

from ..faces import lazy_face

__all__ = ["SyncPlan", "discover_runs", "fingerprint_run", "natural_key", "plan_sync"]

# On first use: the core's own modules import this package's modules one by one.
__getattr__, __dir__ = lazy_face(
    __name__,
    __all__,
    {"changes": "SyncPlan plan_sync", "files": "discover_runs fingerprint_run natural_key"},
)
