"""Rows served against ``statepool export --format verl``: the same states, field by field.

The serving process writes one line per row it served (``live_serve.py --digests``): the
state id and a digest of each field (``prompt``, ``reward_model`` with the ground truth,
``extra_info.*``, ``weight``). The export's Parquet files get the same digests here; the
check counts states in one and not the other, rows out of the export's order, and
rows whose fields differ (by field).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_serve import row_digests


def export_digests(folder: Path) -> list[tuple[str, dict[str, str]]]:
    """Each exported row's state id and field digests, split by split in file order."""
    rows = []
    for path in sorted(folder.glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=2_000):
            for row in batch.to_pylist():
                rows.append((row["extra_info"]["state_id"], row_digests(row)))
    return rows


def served_digests(path: Path) -> list[tuple[str, dict[str, str]]]:
    with open(path, encoding="utf-8") as f:
        return [tuple(json.loads(line)) for line in f]  # type: ignore[misc]


def compare(served: list, exported: list, sample: bool = False) -> dict:
    """What differs between the rows served and the rows exported.

    ``sample``: the rows served were a sample (``live_serve.py --read-limit``); the export's
    other rows are not missing.
    """
    mine, theirs = dict(served), dict(exported)
    both = [sid for sid, _ in served if sid in theirs]
    fields: Counter[str] = Counter()
    equal = 0
    for sid in both:
        a, b = mine[sid], theirs[sid]
        differing = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
        fields.update(differing)
        equal += not differing
    order = [sid for sid, _ in exported if sid in mine]
    return {
        "served": len(served),
        "exported": len(exported),
        "only_served": len(mine.keys() - theirs.keys()),
        "only_exported": len(theirs.keys() - mine.keys()),
        "rows_equal": equal,
        "fields_differing": dict(fields),
        "same_order": order == both,
        "sample": sample,
        "same": equal == len(served) and (sample or len(served) == len(exported)),
    }
