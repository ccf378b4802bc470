"""Dagster-free core: read run folders, join checkpoint states, render curator prompts.

Code outside ``core/`` imports a face, never a module behind it: this package for what
every part shares (the settings, the one error type, where the runs and the store live,
records set aside, counts in words), ``core.names`` for the names the core and the Dagster
skin share, and each sub-package (``core.export``, ``core.store``, …) for its own.
"""

from __future__ import annotations

from .faces import lazy_face

__all__ = [
    "INT64_MAX",
    "RANGED_BLOCK",
    "RAW_LIMIT",
    "AnyPath",
    "PromptInputError",
    "Range",
    "Reject",
    "Settings",
    "Stamp",
    "StatepoolError",
    "UserCodeError",
    "absolute",
    "as_path",
    "call_user",
    "entry_name",
    "escape_bytes",
    "file_stamp",
    "forget_listing",
    "forget_tree",
    "idle_plan",
    "is_local",
    "open_ranged",
    "plural",
    "storage_errors",
    "upload_tree",
]

# On first use: every module of the core imports this package first, and the settings
# import the prompt spec and the join.
__getattr__, __dir__ = lazy_face(
    __name__,
    __all__,
    {
        "config": "Settings",
        "errors": "PromptInputError StatepoolError UserCodeError call_user",
        "idle": "idle_plan",
        "locations": "RANGED_BLOCK AnyPath Stamp absolute as_path entry_name file_stamp"
        " forget_listing forget_tree is_local open_ranged storage_errors upload_tree",
        "ranges": "INT64_MAX Range",
        "rejects": "RAW_LIMIT Reject escape_bytes",
        "words": "plural",
    },
)
