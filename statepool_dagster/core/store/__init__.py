"""The store's files: Parquet parts per run table, state files, rejects, locks.

The face: where each file lives (``StoreLayout``) and the writer lock, atomic writes, a run
table and its parts read (``RunTable``, ``read_spans``, ``CheckpointBatches``), and each
asset's columns (``SCHEMAS``).
"""

from __future__ import annotations

from ..faces import lazy_face

__all__ = [
    "SCHEMAS",
    "CheckpointBatches",
    "RunTable",
    "StoreLayout",
    "file_lock",
    "part_version",
    "read_parquet",
    "read_spans",
    "reject_line",
    "utf8_views",
    "write_bytes_atomic",
    "write_parquet_atomic",
]

# On first use: where the store's files live is asked by every sync, which must not load Arrow.
__getattr__, __dir__ = lazy_face(
    __name__,
    __all__,
    {
        "atomic": "read_parquet write_bytes_atomic write_parquet_atomic",
        "layout": "StoreLayout file_lock reject_line",
        "part_files": "part_version read_spans",
        "parts": "RunTable",
        "reading": "CheckpointBatches",
        "rows": "utf8_views",
        "schemas": "SCHEMAS",
    },
)
