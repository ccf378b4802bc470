"""A rebuilt run reuses what did not change and still equals a build from nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statepool_dagster.core.config import Settings
from statepool_dagster.core.names import EPISODES, PROMPTS, SNAPSHOTS, STATES, TABLE_INDEX
from statepool_dagster.core.stages import build_run
from statepool_dagster.core.store.layout import StoreLayout
from statepool_dagster.core.store.part_files import (
    LEGACY_ROWS_META,
    MERGE,
    PART_ROWS,
    ROWS_META,
    part_name,
)
from statepool_dagster.core.store.parts import RunTable
from statepool_dagster.core.store.reading import read_run_table
from statepool_dagster.core.store.schemas import SCHEMAS
from statepool_dagster.demo.sample_runs import SampleSpec, append_checkpoint, generate_run

from store_helpers import store_pool

SPEC = SampleSpec(n_runs=1, n_checkpoints=5, n_cards=6, emb_dim=8, episodes_per_batch=3)
RUN = "run000"
ASSETS = (EPISODES, SNAPSHOTS, STATES, PROMPTS)


def build(runs: Path, store: Path, **settings) -> dict[str, object]:
    """Every stage for RUN; each stage's ``reused`` count."""
    reports = build_run(Settings(runs_dir=str(runs), store_dir=str(store), **settings), RUN)
    return {asset: report.reused for asset, report in reports.items()}


def assert_same_as_fresh(runs: Path, store: Path, tmp_path: Path, **settings) -> None:
    fresh = tmp_path / "fresh_store"
    build(runs, fresh, **settings)
    assert store_pool(store) == store_pool(fresh)
    for asset in ASSETS:
        ours, plain = (_in_order(pq.read_table(s / asset / RUN)) for s in (store, fresh))
        columns = [c for c in plain.column_names if c != "file_stamp"]
        assert ours.schema.remove_metadata() == plain.schema.remove_metadata(), asset
        assert ours.select(columns).equals(plain.select(columns)), asset
    assert _rejects(store) == _rejects(fresh)


def _in_order(table: pa.Table) -> pa.Table:
    """Rows by checkpoint: a folder read with pyarrow lists its parts in write order."""
    keys = [k for k in ("version", "line") if k in table.column_names]
    return table.sort_by([(k, "ascending") for k in keys])


def _rejects(store: Path) -> list[str]:
    path = store / "rejects" / f"{RUN}.jsonl"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def run(tmp_path) -> Path:
    runs = tmp_path / "runs"
    generate_run(runs / RUN, SPEC, 0)
    return runs / RUN


@pytest.mark.parametrize("followup", ["none", "batch", "next_batch"])
@pytest.mark.parametrize("pairing", ["seed", "pre_curation"])
def test_grown_run_joins_and_renders_only_its_new_checkpoints(run, tmp_path, pairing, followup):
    store = tmp_path / "store"
    build(run.parent, store, pairing=pairing, followup=followup)
    states_before = pq.read_table(store / STATES / RUN).num_rows
    batches_before = len(pq.read_table(store / EPISODES / RUN)["version"].unique())
    append_checkpoint(run, SPEC, 0)
    reused = build(run.parent, store, pairing=pairing, followup=followup)
    assert reused[EPISODES] == batches_before  # only the appended lines' batch written
    assert reused[SNAPSHOTS] == SPEC.n_checkpoints
    # With the seed's pairing the last old state holds the newest library, so its reference
    # ops now diff against the new one: it is rebuilt too. pre_curation's states are not.
    rebuilt_old = 1 if pairing == "seed" else 0
    assert reused[STATES] == states_before - rebuilt_old
    assert reused[PROMPTS] == states_before  # a prompt never shows the reference ops
    assert_same_as_fresh(run.parent, store, tmp_path, pairing=pairing, followup=followup)


def test_unchanged_run_reuses_every_state_and_prompt(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    states = pq.read_table(store / STATES / RUN).num_rows
    reused = build(run.parent, store)
    assert reused[STATES] == reused[PROMPTS] == states
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_snapshot_rewritten_in_place_rebuilds_the_states_that_use_it(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    path = run / "snapshots" / "skills_v2.json"
    library = json.loads(path.read_text(encoding="utf-8"))
    library["cards"][0]["program"] = "Do the rewritten thing"
    path.write_text(json.dumps(library), encoding="utf-8")
    reused = build(run.parent, store)
    # State 2 holds library 2; state 1's reference ops diff library 1 against it.
    assert reused[STATES] == SPEC.n_checkpoints - 2
    state = json.loads((store / "state_pool" / RUN / f"{RUN}_ckpt2.json").read_text("utf-8"))
    assert state["lib_snapshot"]["cards"][0]["program"] == "Do the rewritten thing"
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_episode_edited_before_the_end_is_read_again_from_the_start(run, tmp_path):
    store = tmp_path / "store"
    build(run.parent, store)
    path = run / "episodes.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[1])
    record["response"] = "an edited answer"
    lines[1] = (json.dumps(record) + "\n").encode()
    path.write_bytes(b"".join(lines))
    batches = len(pq.read_table(store / EPISODES / RUN)["version"].unique())
    reused = build(run.parent, store)
    assert reused[EPISODES] == batches - 1  # every line parsed again, one batch written
    assert reused[STATES] == SPEC.n_checkpoints - 2  # states 0 and 1 both pair with batch 0
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_a_same_length_edit_deep_inside_a_grown_file_is_seen(tmp_path):
    """One byte changed far from the file's ends, the file then grown by a checkpoint: the
    bytes before the mark are compared whole, never by a sample of them."""
    spec = SampleSpec(n_runs=1, n_checkpoints=6, n_cards=4, emb_dim=4, episodes_per_batch=300)
    run = generate_run(tmp_path / "runs" / RUN, spec, 0)
    store = tmp_path / "store"
    build(run.parent, store)
    path = run / "episodes.jsonl"
    data = bytearray(path.read_bytes())
    assert len(data) > 1 << 19  # well past what a head, a tail and a few spots would cover
    for fraction in (7, 11, 13, 17):  # a handful of places between any evenly spaced spots
        at = data.index(b'"response": "', len(data) * fraction // 40) + len(b'"response": "')
        data[at] = ord("Z") if data[at] != ord("Z") else ord("Y")
    path.write_bytes(bytes(data))
    append_checkpoint(run, spec, 0)
    build(run.parent, store)
    assert_same_as_fresh(run.parent, store, tmp_path)


@pytest.mark.parametrize("edited", [False, True])
def test_an_older_builds_sha256_mark_is_still_checked(run, tmp_path, edited):
    """A mark written before the CRC (a SHA-256 of the bytes read): trusted only if it holds."""
    store = tmp_path / "store"
    build(run.parent, store)
    index = store / EPISODES / RUN / TABLE_INDEX
    older = json.loads(index.read_bytes())
    seen = older["marks"]["seen"]
    path = run / "episodes.jsonl"
    del seen["crc32"]
    seen["digest"] = hashlib.sha256(path.read_bytes()[: seen["bytes"]]).hexdigest()
    index.write_text(json.dumps(older))
    if edited:  # the same length, far from both ends
        data = bytearray(path.read_bytes())
        at = data.index(b'"response": "', len(data) // 3) + len(b'"response": "')
        data[at] = ord("Z") if data[at] != ord("Z") else ord("Y")
        path.write_bytes(bytes(data))
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store)
    assert_same_as_fresh(run.parent, store, tmp_path)
    assert isinstance(json.loads(index.read_bytes())["marks"]["seen"]["crc32"], int)


def test_bad_lines_before_the_mark_stay_rejected_after_an_append(run, tmp_path):
    store = tmp_path / "store"
    path = run / "episodes.jsonl"
    with open(path, "ab") as f:
        f.write(b"{not json\n\n")
    build(run.parent, store)
    append_checkpoint(run, SPEC, 0)
    with open(path, "ab") as f:
        f.write(b"[1, 2]\n")
    reused = build(run.parent, store)
    assert reused[EPISODES] > 0
    rejects = [json.loads(line) for line in _rejects(store)]
    assert [r["error"].split(":")[0] for r in rejects] == [
        "not valid JSON",
        "not a JSON object (got list)",
    ]
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_line_still_being_written_is_read_again_once_complete(run, tmp_path):
    store = tmp_path / "store"
    path = run / "episodes.jsonl"
    line = json.loads(path.read_bytes().splitlines()[-1])
    text = json.dumps({**line, "id": "late-one"}).encode()
    with open(path, "ab") as f:
        f.write(text[:10])  # half a line, no newline yet
    build(run.parent, store)
    assert len(_rejects(store)) == 1
    with open(path, "ab") as f:
        f.write(text[10:] + b"\n")
    reused = build(run.parent, store)
    assert reused[EPISODES] > 0
    assert _rejects(store) == []
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_lost_index_falls_back_to_each_parts_own_footer(run, tmp_path):
    """After a kill -9 between a part and the index, the parts themselves are the truth."""
    store = tmp_path / "store"
    build(run.parent, store)
    for asset in ASSETS:
        (store / asset / RUN / TABLE_INDEX).unlink()
    reused = build(run.parent, store)
    assert reused[STATES] == reused[PROMPTS] == SPEC.n_checkpoints
    assert_same_as_fresh(run.parent, store, tmp_path)


@pytest.mark.parametrize(
    ("key", "size"),
    [("bytes", -5), ("bytes", "12"), ("bytes", True), ("bytes", 10**12),
     ("lines", "12"), ("lines", None), ("lines", -1), ("blank", 1.5), ("blank", None)],
)  # fmt: skip
def test_a_hand_edited_episodes_mark_is_read_again_never_a_crash(run, tmp_path, key, size):
    """The index's record of how far episodes.jsonl was read, edited to nonsense."""
    store = tmp_path / "store"
    build(run.parent, store)
    index = store / EPISODES / RUN / TABLE_INDEX
    edited = json.loads(index.read_bytes())
    edited["marks"]["seen"][key] = size
    index.write_text(json.dumps(edited))
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store)
    assert_same_as_fresh(run.parent, store, tmp_path)


@pytest.mark.parametrize("crc", [0, -1, 2**40, "12", None, 1.5])
def test_a_hand_edited_episodes_checksum_is_read_again_never_a_crash(run, tmp_path, crc):
    """The CRC-32 of the bytes read, in the index's mark, edited to another or to nonsense."""
    store = tmp_path / "store"
    build(run.parent, store)
    index = store / EPISODES / RUN / TABLE_INDEX
    edited = json.loads(index.read_bytes())
    edited["marks"]["seen"]["crc32"] = crc
    index.write_text(json.dumps(edited))
    path = run / "episodes.jsonl"
    data = bytearray(path.read_bytes())
    data[data.index(b'"response": "') + len(b'"response": "')] ^= 1  # the mark is then wrong
    path.write_bytes(bytes(data))
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store)
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_part_of_another_build_is_rebuilt_not_reused(run, tmp_path):
    """A checkpoint whose key does not match its inputs (an older format, a hand edit) is redone."""
    store = tmp_path / "store"
    build(run.parent, store)
    (store / STATES / RUN / TABLE_INDEX).unlink()
    for part in (store / STATES / RUN).glob("p*.parquet"):
        table = pq.read_table(part)
        rows = json.loads(pq.ParquetFile(part).metadata.metadata[ROWS_META])
        if any(name == part_name(2) for name, _, _ in rows):
            break
    rows = [[n, "stale" if n == part_name(2) else key, info] for n, key, info in rows]
    meta = {LEGACY_ROWS_META: json.dumps(rows).encode()}  # a row group each, as before
    pq.write_table(table.replace_schema_metadata(meta), part, row_group_size=1)
    reused = build(run.parent, store)
    assert reused[STATES] == SPEC.n_checkpoints - 1
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_states_built_alone_keep_the_originals_bytes(run, tmp_path):
    """Materializing checkpoint_states on its own (e.g. from the UI) over stored upstream parts."""
    store = tmp_path / "store"
    build(run.parent, store)
    shutil.rmtree(store / "state_pool")
    shutil.rmtree(store / STATES / RUN)
    build_run(Settings(runs_dir=str(run.parent), store_dir=str(store)), RUN, [STATES])
    fresh = tmp_path / "fresh_store"
    build(run.parent, fresh)
    assert store_pool(store) == store_pool(fresh)


@pytest.mark.parametrize("pairing", ["seed", "pre_curation"])
def test_a_new_checkpoint_rewrites_no_older_part_but_the_newest(run, tmp_path, pairing):
    """Append-only: growth by one checkpoint leaves every part but the newest one untouched.

    The newest checkpoint of a build sits in a part of its own (with the seed's pairing
    its reference ops change once a next library exists), so nothing else is rewritten.
    """
    store = tmp_path / "store"
    build(run.parent, store, pairing=pairing)
    before = {p: p.stat().st_mtime_ns for p in store.rglob("p*.parquet")}
    files_before = {p: p.stat().st_mtime_ns for p in (store / "state_pool").rglob("*.json")}
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store, pairing=pairing)
    after = {p: p.stat().st_mtime_ns for p in store.rglob("p*.parquet")}
    untouched = {p: t for p, t in before.items() if after.get(p) == t}
    assert len(untouched) >= len(before) - 2  # at most the newest state's and prompt's parts
    big = max(before, key=lambda p: p.stat().st_size if p.exists() else 0)
    assert big in untouched
    files_after = {p: p.stat().st_mtime_ns for p in (store / "state_pool").rglob("*.json")}
    changed = {p for p in files_before if files_after[p] != files_before[p]}
    assert len(changed) <= (1 if pairing == "seed" else 0)
    assert len(files_after) == len(files_before) + 1


def test_lost_part_is_noticed_and_the_file_read_again(run, tmp_path):
    """Parts deleted by hand: the stored rows no longer add up to the mark, so all is re-read."""
    store = tmp_path / "store"
    build(run.parent, store)
    for part in (store / EPISODES / RUN).glob("p*.parquet"):
        part.unlink()
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store)
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_interleaved_versions_keep_every_line_in_its_batch(run, tmp_path):
    """A trainer writing two versions' episodes alternately: one batch each, lines in order."""
    path = run / "episodes.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[0::2] + lines[1::2]))
    store = tmp_path / "store"
    build(run.parent, store)
    table = pq.read_table(store / EPISODES / RUN)
    assert table.num_rows == len(lines)
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_a_lone_surrogate_is_a_reject_not_a_failed_run(run, tmp_path):
    store = tmp_path / "store"
    with open(run / "episodes.jsonl", "ab") as f:
        f.write(b'{"id": "bad", "skill_lib_version": 1, "response": "\\ud800"}\n')
    build(run.parent, store)
    (reject,) = [json.loads(line) for line in _rejects(store)]
    assert "lone surrogate" in reject["error"] and reject["line"] > 1


def test_state_text_change_on_an_object_store_keeps_its_manifest_whole(run, tmp_path):
    """Every state file rewritten one by one on memory://: the manifest names the new digests."""
    from statepool_dagster.compat import load_state_pool

    store = f"memory://statepool-test-{tmp_path.name}/store"
    build(run.parent, store)
    rebuilt = build(run.parent, store, dataset="another")
    assert rebuilt[STATES] == 0
    states = load_state_pool(f"{store}/state_pool/{RUN}")
    assert states and {s.dataset for s in states} == {"another"}


def test_a_run_grown_one_checkpoint_at_a_time_keeps_few_parts(run, tmp_path):
    """Small parts of a size merge (tiered): few files, the tables and states unchanged."""
    store = tmp_path / "store"
    build(run.parent, store)
    for _ in range(40):
        append_checkpoint(run, SPEC, 0)
        build(run.parent, store)
    for asset in ASSETS:
        parts = list((store / asset / RUN).glob("p*.parquet"))
        # from scratch: 2 parts; each growth adds 1-2; 40 growths leave fewer than 2 tiers' worth
        assert len(parts) <= 2 * (MERGE - 1) + 2, (asset, len(parts))
    assert_same_as_fresh(run.parent, store, tmp_path)


def test_readers_never_fail_while_a_growing_run_merges_its_parts(run, tmp_path):
    """A lock-free reader racing the saves that prune and merge parts always gets a whole
    table: every checkpoint once, none missing, never fewer than before the growth began."""
    store = tmp_path / "store"
    build(run.parent, store)
    assets = (SNAPSHOTS, STATES, PROMPTS)
    first = {a: read_run_table(StoreLayout(store), a, RUN).num_rows for a in assets}
    done, errors, reads = threading.Event(), [], []

    def read_until_done() -> None:
        while not done.is_set():
            for asset in assets:
                try:
                    table = read_run_table(StoreLayout(store), asset, RUN, columns=["version"])
                except Exception as error:
                    errors.append(repr(error))
                    continue
                versions = table.column("version").to_pylist()
                if versions != list(range(versions[0], versions[0] + len(versions))):
                    errors.append(f"{asset}: torn read {versions}")
                if not first[asset] <= len(versions) <= first[asset] + 20:
                    errors.append(f"{asset}: {len(versions)} rows, {first[asset]} before")
                reads.append(len(versions))

    reader = threading.Thread(target=read_until_done)
    reader.start()
    try:
        for _ in range(20):
            append_checkpoint(run, SPEC, 0)
            build(run.parent, store)
    finally:
        done.set()
        reader.join()
    assert errors == []
    assert len(reads) > 20


def test_a_long_run_is_cut_into_parts_of_bounded_size(tmp_path):
    """Writers and open footers hold per-checkpoint metadata: no part exceeds PART_ROWS
    checkpoints, and row groups hold several."""
    runs, store = tmp_path / "runs", tmp_path / "store"
    n = PART_ROWS + 40
    tiny = SampleSpec(n_runs=1, n_checkpoints=n, n_cards=2, emb_dim=2, episodes_per_batch=1)
    generate_run(runs / RUN, tiny, 0)
    build(runs, store)
    for asset in (SNAPSHOTS, STATES, PROMPTS):
        parts = sorted((store / asset / RUN).glob("p*.parquet"))
        footers = [pq.ParquetFile(p).metadata for p in parts]
        sizes = [len(json.loads(f.metadata[ROWS_META])) for f in footers]
        assert len(parts) >= 2 and max(sizes) <= PART_ROWS and sum(sizes) == n, (asset, sizes)
        assert sum(f.num_row_groups for f in footers) < n / 8, (asset, sizes)
        versions = read_run_table(StoreLayout(store), asset, RUN, columns=["version"])
        assert versions.column("version").to_pylist() == list(range(n))


def test_reading_a_whole_table_keeps_no_part_open_behind_it(tmp_path):
    """A part read whole is closed at once: a long run's table is read holding one footer
    (~10 KB a row group) at a time, not OPEN_PARTS of them."""
    runs, store = tmp_path / "runs", tmp_path / "store"
    tiny = SampleSpec(
        n_runs=1, n_checkpoints=PART_ROWS + 8, n_cards=1, emb_dim=1, episodes_per_batch=1
    )
    generate_run(runs / RUN, tiny, 0)
    build(runs, store)
    table = RunTable(store / STATES / RUN, SCHEMAS[STATES])
    assert len({part.file for part in table.parts.values()}) >= 2
    assert table.read(["version"]).num_rows == PART_ROWS + 8
    assert table._open == {}


def test_runs_synced_under_older_reader_rules_are_read_again(tmp_path, monkeypatch):
    """An upgrade that changes what the readers keep re-reads every run once, files untouched."""
    from statepool_dagster.core.runs import files
    from statepool_dagster.core.runs.changes import plan_sync
    from statepool_dagster.core.stages.job import TABLE_FORMAT

    generate_run(tmp_path / "runs" / "r", SampleSpec(n_checkpoints=3), 0)
    discovery = files.discover_runs(tmp_path / "runs")
    with monkeypatch.context() as old:
        old.setattr(files, "READER_VERSION", "1")
        recorded = {"r": files.fingerprint_run(tmp_path / "runs" / "r").digest}
    assert [s.status for s in plan_sync(discovery, ["r"], recorded, now=0.0).runs] == ["changed"]
    current = {"r": files.fingerprint_run(tmp_path / "runs" / "r").digest}
    assert [s.status for s in plan_sync(discovery, ["r"], current, now=0.0).runs] == ["unchanged"]
    assert TABLE_FORMAT.endswith(files.READER_VERSION)  # the parts' keys change with the rules


def _reshaped(index: dict, how: str):
    first = next(iter(index["parts"]))
    return {
        "a list": [index],
        "parts a list": {**index, "parts": list(index["parts"])},
        "marks a list": {**index, "marks": [1]},
        "rows a string": {**index, "parts": {first: {**index["parts"][first], "rows": "x"}}},
        "rows short": {
            **index,
            "parts": {first: {**index["parts"][first], "rows": [[1, 2]]}},
        },
        "spans too few": {
            **index,
            "parts": {first: {**index["parts"][first], "spans": []}},
        },
    }[how]


@pytest.mark.parametrize("asset", ASSETS)
@pytest.mark.parametrize(
    "how",
    ["a list", "parts a list", "marks a list", "rows a string", "rows short", "spans too few"],
)
def test_a_table_index_of_another_shape_is_no_index_never_a_crash(run, tmp_path, asset, how):
    """Each table's ``.index.json`` reshaped by hand: its parts' own footers are read instead."""
    store = tmp_path / "store"
    build(run.parent, store)
    index = store / asset / RUN / TABLE_INDEX
    index.write_text(json.dumps(_reshaped(json.loads(index.read_bytes()), how)))
    append_checkpoint(run, SPEC, 0)
    build(run.parent, store)
    assert_same_as_fresh(run.parent, store, tmp_path)
