"""The export's tables made through Arrow's buffers (core/store/columns.py) equal pyarrow's
own conversion of the same records, value for value and byte for byte once written."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.export.formats import trl_schema, verl_schema
from statepool_dagster.core.store.cells import text_cells
from statepool_dagster.core.store.columns import column, records_table


def _verl(i: int, sources: bool, weighted: bool) -> dict:
    record = {
        "data_source": "statepool/pool",
        "prompt": [{"role": "user", "content": f'prompt {i} — é ✓ \U0001f600 \x00 "q"'}],
        "ability": "skill_curation",
        "reward_model": {"style": "rule", "ground_truth": "{}" if i % 3 else None},
        "extra_info": {
            "index": i,
            "split": "train",
            "state_id": f"run{i}_ckpt0",
            "run": f"run{i}",
            "version": i * 7 - 3,
            "has_reference_ops": i % 2 == 0,
            "state": '{"a": ' + str(i) + "}",
            "reference_ops": "" if i % 4 else "[]",
            "prompt_tokens": None if i % 5 else 10**12 + i,
        },
        "stand_in_for": "left out: not in the schema",
    }
    if sources:
        record["extra_info"].update(
            {"source": "session", "session": None if i % 2 else "s1", "policy_step": i}
        )
    if weighted:
        record["weight"] = None if i == 3 else i / 7
    return record


def _trl(i: int, sources: bool, weighted: bool) -> dict:
    record = {
        "prompt": [] if i == 2 else [{"role": "system", "content": "s"}, {"role": "user"}],
        "state_id": f"s{i}",
        "run": "r",
        "version": -(2**63) if i == 1 else 2**63 - 1,
        "ground_truth": "x" * i,
        "reference_ops": "",
        "followup_qids": [str(q) for q in range(i % 4)],
        "gt_map": "{}",
        "state": "{}",
        # prompt_tokens missing: null
    }
    if sources:
        record.update({"source": "run", "session": None, "policy_step": None})
    if weighted:
        record["weight"] = 1
    return record


@pytest.mark.parametrize("make, schema", [(_verl, verl_schema), (_trl, trl_schema)])
@pytest.mark.parametrize("sources", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n", [0, 1, 9, 70])
def test_records_table_equals_pyarrows_conversion_and_writes_the_same_bytes(
    tmp_path, make, schema, sources, weighted, n
):
    records = [make(i, sources, weighted) for i in range(n)]
    wanted = pa.Table.from_pylist(records, schema=schema(sources, weighted))
    made = records_table(records, schema(sources, weighted))
    assert made.schema == wanted.schema
    assert made.to_pylist() == wanted.to_pylist()
    made.validate(full=True)
    for name, table in (("made", made), ("wanted", wanted)):
        pq.write_table(table, tmp_path / f"{name}.parquet", compression="zstd")
    assert (tmp_path / "made.parquet").read_bytes() == (tmp_path / "wanted.parquet").read_bytes()


@pytest.mark.parametrize(
    "values, type_",
    [
        ([1, "2"], pa.int64()),
        ([True], pa.int64()),
        ([1.5], pa.string()),
        (["x"], pa.float64()),
        ([1], pa.bool_()),
        (["ab"], pa.list_(pa.string())),
        ([["a"]], pa.struct([("a", pa.string())])),
        ([2**63], pa.int64()),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(values, type_):
    with pytest.raises((TypeError, OverflowError)):
        column(values, type_)


def test_an_export_of_records_loads_no_pandas():
    code = (
        "import sys\n"
        "from statepool_dagster.core.store.columns import records_table\n"
        "from statepool_dagster.core.export.formats import verl_schema\n"
        "records_table([{'extra_info': {'index': 1}}], verl_schema())\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


TEXTS = ["", "ascii", 'é ✓ \U0001f600 \x00 "q"', "x" * 1000]


@pytest.mark.parametrize("type_", [pa.string(), pa.large_string()])
@pytest.mark.parametrize(
    "pick",
    [
        lambda cells: cells,
        lambda cells: [*cells[:2], None, *cells[2:]],  # a null among cells
        lambda cells: [cells[0], TEXTS[1], *cells[2:]],  # a str among cells
    ],
)
def test_a_column_of_text_cells_equals_the_column_of_their_texts(type_, pick):
    stored = pa.chunked_array([pa.array(TEXTS[:2], pa.large_string()), TEXTS[2:]])
    cells = text_cells(stored)
    assert [len(c) for c in cells] == [len(t) for t in TEXTS]
    assert [c.utf8().tobytes() for c in cells] == [t.encode() for t in TEXTS]
    values = pick(cells)
    made = column(values, type_)
    made.validate(full=True)
    assert made.equals(pa.array([None if v is None else str(v) for v in values], type_))


def test_a_column_of_cells_of_both_text_types_is_made_from_their_texts():
    small = text_cells(pa.chunked_array([pa.array(TEXTS[:2], pa.string())]))
    large = text_cells(pa.chunked_array([pa.array(TEXTS[2:], pa.large_string())]))
    made = column([*small, *large], pa.large_string())
    assert made.equals(pa.array(TEXTS, pa.large_string()))
