"""The streamed export writes, byte for byte, what holding the whole pool wrote: same rows,
same order, same splits, same duplicate winners, same manifest.

``reference_export`` below is the export as it was before it streamed (every run's tables
read whole, every row held, each file written in one piece), kept here as the yardstick.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.export import write as export_write
from statepool_dagster.core.export.formats import TRL_SCHEMA, VERL_SCHEMA
from statepool_dagster.core.export.rows import MANIFEST, ExportOptions, split_of
from statepool_dagster.core.export.write import stream_export
from statepool_dagster.core.names import PROMPTS, STATES
from statepool_dagster.core.runs.files import natural_key
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.reading import read_run_table
from statepool_dagster.demo.sample_runs import SampleSpec, generate_runs

GOLDEN_RUNS = Path(__file__).parents[1] / "golden" / "runs"
OPTIONS = (
    ExportOptions(),
    ExportOptions(val_fraction=0.3, test_fraction=0.2, seed=3),
    ExportOptions(val_fraction=0.0),
)
NOT_RECORDED = {"next_version": None, "ops": [], "note": "not recorded: rematerialize the run"}


def _build(runs: Path, store: Path) -> Path:
    settings = Settings(runs_dir=str(runs), store_dir=str(store))
    for run in sorted(p.name for p in runs.iterdir() if p.is_dir()):
        build_run(settings, run)
    return store


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """The golden runs, and sample runs with copies named before, after and beside theirs."""
    root = tmp_path_factory.mktemp("stream")
    runs = root / "sample_runs"
    generate_runs(runs, SampleSpec(n_runs=6, n_checkpoints=4, n_cards=5, emb_dim=4))
    shutil.copytree(runs / "run003", runs / "alpha_copy")
    shutil.copytree(runs / "run001", runs / "run001-again")
    shutil.copytree(runs / "run004", runs / "zz_copy")
    return {
        "golden": _build(GOLDEN_RUNS, root / "golden_store"),
        "duplicates": _build(runs, root / "sample_store"),
    }


def _key(state: dict) -> str:
    canonical = json.dumps(
        [state.get("lib_snapshot"), state.get("episodes")],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()


def reference_export(store: Path, options: ExportOptions) -> dict[str, dict[str, bytes]]:
    """``{format: {file: bytes}}`` of an export made with the whole pool in memory."""
    layout = StoreLayout(store)
    both = set(layout.runs_with(PROMPTS)) & set(layout.runs_with(STATES))
    rows, runs, seen, duplicates = [], {}, {}, {}
    index = dict.fromkeys(("train", "val", "test"), 0)
    for run in sorted(both, key=natural_key):
        split = split_of(run, options)
        states = {r["state_id"]: r for r in read_run_table(layout, STATES, run).to_pylist()}
        for prompt in read_run_table(layout, PROMPTS, run).to_pylist():
            sid = prompt["state_id"]
            state_row = states[sid]
            state = json.loads(state_row["state"])
            if _key(state) in seen:
                duplicates[sid] = seen[_key(state)]
                continue
            seen[_key(state)] = sid
            ops = state_row["reference_ops"] or prompt["reference_ops"] or json.dumps(NOT_RECORDED)
            rows.append((index[split], split, sid, run, state_row, state, prompt["prompt"], ops))
            index[split] += 1
            if run not in runs.setdefault(split, []):
                runs[split].append(run)
    problems = []
    pairs: dict[tuple[str, str], list[str]] = {}
    for dropped, kept in duplicates.items():
        key = (dropped.rsplit("_ckpt", 1)[0], kept.rsplit("_ckpt", 1)[0])
        pairs.setdefault(key, []).append(dropped)
    for (dropped_run, kept_run), ids in pairs.items():
        listed = ", ".join(ids[:5]) + (f", … ({len(ids)} in all)" if len(ids) > 5 else "")
        problems.append(
            f"{dropped_run}: {len(ids)} states identical to {kept_run}'s left out "
            f"(the earliest run by name keeps them): {listed}"
        )
    problems += [
        f"no run fell in split {s!r}: it has no file"
        for s in options.splits
        if rows and s not in runs
    ]
    summary = {
        "rows": {s: sum(1 for r in rows if r[1] == s) for s in options.splits},
        "runs": {s: runs.get(s, []) for s in options.splits},
        "duplicates_dropped": len(duplicates),
        "problems": problems,
        "options": options.model_dump(),
    }
    out: dict[str, dict[str, bytes]] = {}
    for fmt in ("verl", "trl", "pool"):
        files: dict[str, bytes] = {}
        if fmt == "pool":
            files = {f"{r[2]}.json": r[4]["state"].encode("utf-8") for r in rows}
        for split in options.splits if fmt != "pool" else ():
            records = [_record(fmt, r) for r in rows if r[1] == split]
            if records:
                schema = VERL_SCHEMA if fmt == "verl" else TRL_SCHEMA
                sink = io.BytesIO()
                pq.write_table(
                    pa.Table.from_pylist(records, schema=schema), sink, compression="zstd"
                )
                files[f"{split}.parquet"] = sink.getvalue()
        manifest = json.dumps({"format": fmt, **summary}, ensure_ascii=False, indent=1)
        files[MANIFEST] = manifest.encode("utf-8")
        out[fmt] = files
    return out


def _record(fmt: str, row: tuple) -> dict:
    index, split, sid, run, state_row, state, prompt, ops = row
    messages = [{"role": "user", "content": prompt}]
    truth = json.dumps(json.loads(ops)["ops"], ensure_ascii=False)
    if fmt == "trl":
        return {
            "prompt": messages,
            "state_id": sid,
            "run": run,
            "version": state_row["version"],
            "ground_truth": truth,
            "reference_ops": ops,
            "followup_qids": [str(q) for q in state.get("followup_qids", [])],
            "gt_map": json.dumps(state.get("gt_map", {}), ensure_ascii=False),
            "state": state_row["state"],
            "prompt_tokens": None,
        }
    return {
        "data_source": f"statepool/{state.get('dataset', '')}",
        "prompt": messages,
        "ability": "skill_curation",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {
            "index": index,
            "split": split,
            "state_id": sid,
            "run": run,
            "version": state_row["version"],
            "has_reference_ops": json.loads(ops).get("next_version") is not None,
            "state": state_row["state"],
            "reference_ops": ops,
            "prompt_tokens": None,
        },
    }


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "val-test-seed", "train-only"])
@pytest.mark.parametrize("fixture", ["golden", "duplicates"])
def test_streamed_export_is_byte_identical_to_the_whole_pool_export(
    stores, tmp_path, fixture, options
):
    store = stores[fixture]
    expected = reference_export(store, options)
    outs = {fmt: tmp_path / fmt for fmt in expected}
    export = stream_export(store, outs, options)
    for fmt, files in expected.items():
        assert _files(outs[fmt]) == files, fmt
    if fixture == "duplicates":
        assert export.duplicates == {
            **{f"run003_ckpt{k}": f"alpha_copy_ckpt{k}" for k in range(4)},
            **{f"run001-again_ckpt{k}": f"run001_ckpt{k}" for k in range(4)},
            **{f"zz_copy_ckpt{k}": f"run004_ckpt{k}" for k in range(4)},
        }


def test_a_split_larger_than_a_row_group_holds_the_same_rows(stores, tmp_path, monkeypatch):
    """A large split is written a row group at a time: the same table, in more groups."""
    store, options = stores["duplicates"], OPTIONS[0]
    expected = reference_export(store, options)["verl"]
    monkeypatch.setattr(export_write, "ROW_GROUP_BYTES", 20_000)
    stream_export(store, {"verl": tmp_path / "verl"}, options)
    train = tmp_path / "verl" / "train.parquet"
    assert pq.ParquetFile(train).metadata.num_row_groups > 1
    assert pq.read_table(train).equals(pq.read_table(io.BytesIO(expected["train.parquet"])))
    assert (tmp_path / "verl" / MANIFEST).read_bytes() == expected[MANIFEST]
