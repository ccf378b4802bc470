"""Parts hold several checkpoints a row group; a store of one row group per checkpoint
(written before) is still read, reused and grown."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES, TABLE_INDEX
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.store.parts import RunTable
from statepool_dagster.core.store.reading import CheckpointBatches
from statepool_dagster.core.store.schemas import SCHEMAS
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

from store_helpers import store_pool

SPEC = SampleSpec(n_runs=1, n_checkpoints=12, n_cards=4, emb_dim=4, episodes_per_batch=3)
RUN = "run000"
ASSETS = (EPISODES, SNAPSHOTS, STATES, PROMPTS)
# What parts are named by today, and by the layout before (one row group per checkpoint).
ROWS_META, SPANS_META = b"statepool.checkpoints", b"statepool.spans"
LEGACY_ROWS_META = b"statepool.rows"


def build(runs: Path, store: Path) -> dict[str, int]:
    reports = build_run(Settings(runs_dir=str(runs), store_dir=str(store)), RUN)
    return {asset: report.reused for asset, report in reports.items()}


def tables(store: Path) -> dict[str, pa.Table]:
    """Each asset's rows as the store reads them, in checkpoint order."""
    out = {}
    for asset in ASSETS:
        table = RunTable(store / asset / RUN, SCHEMAS[asset])
        out[asset] = table.read()
        table.close()
    return out


def to_old_layout(folder: Path) -> None:
    """Rewrite each part as before: a row group per checkpoint, the old key, no index."""
    (folder / TABLE_INDEX).unlink()
    for part in folder.glob("p*.parquet"):
        meta = pq.ParquetFile(part).metadata
        spans = json.loads(meta.metadata[SPANS_META])
        rows = meta.metadata[ROWS_META]
        whole = pq.read_table(part)
        writer = pq.ParquetWriter(part, whole.schema.remove_metadata())
        for g, offset, count in spans:
            first = sum(meta.row_group(i).num_rows for i in range(g)) + offset
            writer.write_table(whole.slice(first, count).replace_schema_metadata(None))
        writer.add_key_value_metadata({LEGACY_ROWS_META.decode(): rows.decode()})
        writer.close()
        assert pq.ParquetFile(part).metadata.num_row_groups == len(spans)


@pytest.fixture
def run(tmp_path) -> Path:
    runs = tmp_path / "runs"
    generate_run(runs / RUN, SPEC, 0)
    return runs / RUN


def test_a_build_puts_checkpoints_together_in_few_row_groups(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    for asset in ASSETS:
        parts = list((store / asset / RUN).glob("p*.parquet"))
        groups = sum(pq.ParquetFile(p).metadata.num_row_groups for p in parts)
        assert groups <= 2, (asset, groups)  # the newest checkpoint apart, the rest together
        # Code of the one-row-group-per-checkpoint layout finds neither key it reads, so it
        # takes these parts for foreign ones and rebuilds, never misplacing rows.
        assert all(LEGACY_ROWS_META not in pq.ParquetFile(p).metadata.metadata for p in parts)
        assert "files" not in json.loads((store / asset / RUN / TABLE_INDEX).read_bytes())


def test_a_store_of_a_row_group_per_checkpoint_is_read_reused_and_grown(run, tmp_path):
    store, fresh = tmp_path / "store", tmp_path / "fresh"
    build(run.parent, store)
    before = tables(store)
    for asset in ASSETS:
        to_old_layout(store / asset / RUN)
    assert all(tables(store)[a].equals(before[a]) for a in ASSETS)
    batches = CheckpointBatches(RunTable(store / STATES / RUN, SCHEMAS[STATES]))
    read = [t for _, t in batches.batches(["state_id", "version"], 5)]
    batches.close()
    assert pa.concat_tables(read).equals(before[STATES].select(["state_id", "version"]))
    reused = build(run.parent, store)
    assert reused[STATES] == reused[PROMPTS] == reused[SNAPSHOTS] == SPEC.n_checkpoints
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store)
    build(run.parent, fresh)
    assert store_pool(store) == store_pool(fresh)
    ours, theirs = tables(store), tables(fresh)
    for asset in ASSETS:
        columns = [c for c in theirs[asset].column_names if c != "file_stamp"]
        assert ours[asset].select(columns).equals(theirs[asset].select(columns)), asset


def test_a_checkpoint_replaced_inside_a_shared_row_group_reads_back_alone(run, tmp_path):
    """A part pruned of one checkpoint: the others move on, sliced from their row group."""
    store = tmp_path / "store"
    build(run.parent, store)
    table = RunTable(store / STATES / RUN, SCHEMAS[STATES])
    names = table.names()
    before = table.read()
    table.drop(names[3])
    table.save()
    again = RunTable(store / STATES / RUN, SCHEMAS[STATES])
    assert again.names() == names[:3] + names[4:]
    kept = pa.concat_tables([before.slice(0, 3), before.slice(4)])
    assert again.read().equals(kept)
    assert again.read_part(names[5]).equals(before.slice(5, 1))
    again.close()
