"""The trainer's exports: rows from runs and sessions, splits, verl/TRL/pool.

The face: what an export holds (``ExportOptions``, ``ExportSet``, ``ExportRow`` and the row
makers), which copy of a state a trainer gets (``CopyRules``), each trainer format's record
and schema, and ``stream_export``, which writes one.
"""

from __future__ import annotations

from ..faces import lazy_face

__all__ = [
    "SPLITS",
    "CopyRules",
    "ExportOptions",
    "ExportRefused",
    "ExportRow",
    "ExportSet",
    "LengthFilter",
    "SourceOptions",
    "check_target",
    "empty_train_problem",
    "kept_alone",
    "load_counter",
    "run_row",
    "session_row",
    "split_of",
    "stream_export",
    "tables_agree",
    "trl_record",
    "trl_schema",
    "verl_record",
    "verl_schema",
]

# On first use: the formats and the writer load Arrow.
__getattr__, __dir__ = lazy_face(
    __name__,
    __all__,
    {
        "collect": "empty_train_problem tables_agree",
        "formats": "trl_record trl_schema verl_record verl_schema",
        "gate": "LengthFilter load_counter",
        "rows": "SPLITS ExportOptions ExportRow ExportSet SourceOptions run_row session_row"
        " split_of",
        "selection": "CopyRules kept_alone",
        "write": "ExportRefused check_target stream_export",
    },
)
