"""Every fast path equals the exact path it shortcuts."""

from __future__ import annotations

import json
import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from statepool_dagster.core.runs.json_read import blank_embeddings
from statepool_dagster.core.runs.snapshots import _parse_exact, parse_library
from statepool_dagster.core.states.models import CheckpointState, dumps, state_bytes
from statepool_dagster.core.store.preview import markdown_preview

text = st.text(max_size=30)
scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), text)
embedding = st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=6)
card = st.fixed_dictionaries(
    {"card_id": text, "trigger": text, "program": text},
    optional={
        "_trigger_emb": embedding,
        "meta_info": st.dictionaries(text, st.integers(0, 9), max_size=3),
        "note": scalar,
        "nested": st.dictionaries(text, scalar, max_size=2),
    },
)
library = st.fixed_dictionaries(
    {"version": st.integers(0, 99), "cards": st.lists(card, max_size=5)},
    optional={"extra": scalar, "_trigger_emb": embedding},
)


@settings(max_examples=300)
@given(library, st.sampled_from([None, 1, 2]), st.booleans())
def test_fast_snapshot_parse_equals_exact_parse(lib, indent, shuffle_keys):
    if shuffle_keys:
        lib = {**lib, "cards": [dict(reversed(list(c.items()))) for c in lib["cards"]]}
    data = json.dumps(lib, ensure_ascii=False, indent=indent).encode("utf-8")
    assert parse_library(data) == _parse_exact(data)


def test_embedding_key_inside_a_string_is_left_alone():
    lib = {"cards": [{"card_id": "a", "trigger": 'x "_trigger_emb": [1]', "program": "p"}]}
    data = json.dumps(lib).encode()
    assert blank_embeddings(data) == (data, 0)
    assert parse_library(data) == lib


def test_nan_embeddings_are_dropped_like_the_original_reads_them():
    data = b'{"version": 1, "cards": [{"card_id": "a", "trigger": "t", "program": "p",'
    data += b' "_trigger_emb": [NaN, Infinity, -Infinity, 0.5]}]}'
    assert parse_library(data) == {
        "version": 1,
        "cards": [{"card_id": "a", "trigger": "t", "program": "p"}],
    }


def test_top_level_embedding_key_is_kept_as_the_original_keeps_it():
    lib = {
        "version": 0,
        "_trigger_emb": [1.0],
        "cards": [{"card_id": "a", "trigger": "t", "program": "p"}],
    }
    assert parse_library(json.dumps(lib).encode()) == lib


json_value = st.recursive(
    scalar | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
episode = st.dictionaries(text, json_value, max_size=4)


@settings(max_examples=300)
@given(
    library,
    st.lists(episode, max_size=4),
    st.none() | st.dictionaries(text, json_value, max_size=3),
    text,
    st.lists(text, max_size=3),
    st.dictionaries(text, json_value, max_size=3),
)
def test_state_text_assembled_from_stored_parts_equals_the_whole_state_encoded(
    lib, episodes, analysis, receipt, qids, gt_map
):
    """What build_states writes (parts stored as ``dumps`` text) is ``to_json`` exactly."""
    fields = dict(state_id="r_ckpt3", dataset="ovo", analysis=analysis, last_receipt=receipt)
    whole = CheckpointState(
        **fields, lib_snapshot=lib, episodes=episodes, followup_qids=qids, gt_map=gt_map
    ).to_json()
    parts = state_bytes(
        "r_ckpt3",
        "ovo",
        dumps(lib),
        [dumps(e) for e in episodes],
        analysis,
        receipt,
        qids,
        gt_map,
        errors="surrogatepass",  # hypothesis text holds lone surrogates; the bytes keep them
    ).decode("utf-8", "surrogatepass")
    assert parts == whole
    assert CheckpointState.trusted(parts) == CheckpointState.from_json(parts)


def test_trusted_read_takes_what_only_python_json_writes():
    state = CheckpointState(
        state_id="r_ckpt0",
        dataset="ovo",
        lib_snapshot={"cards": [], "score": float("nan"), "big": 10**30},
        episodes=[{"realtime": float("inf")}],
        analysis=None,
        last_receipt="",
    )
    text = state.to_json()
    assert "NaN" in text and "Infinity" in text  # msgspec refuses both; json reads them
    assert CheckpointState.trusted(text).to_json() == text


def test_markdown_preview_escapes_cells_and_stops_at_the_row_limit():
    table = pa.table({"a": list(range(12)), "b": ["x|y", "two\nlines", None] + ["z"] * 9})
    lines = markdown_preview(table, ["b", "a"], rows=3).splitlines()
    assert lines == ["| b | a |", "|---|---|", "| x\\|y | 0 |", "| two lines | 1 |", "|  | 2 |"]
    assert markdown_preview(table.slice(0, 0), ["a"]) == "_no rows_"


json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_infinity=False),  # NaN too: the json path takes it
        st.text(max_size=12),
    ),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300)
@given(lib=json_value, episodes=json_value, other=json_value, ascii_only=st.booleans())
def test_a_states_text_digest_is_its_digest(lib, episodes, other, ascii_only):
    from statepool_dagster.core.states.digest import state_digest, state_text_digest

    state = {"state_id": "x", "lib_snapshot": lib, "other": other, "episodes": episodes}
    text = json.dumps(state, ensure_ascii=ascii_only)
    assert state_text_digest(text) == state_digest(json.loads(text))
    assert state_text_digest(text.encode("utf-8")) == state_digest(json.loads(text))


@settings(max_examples=300)
@given(
    lib=st.dictionaries(st.text(max_size=6), json_value, max_size=4),
    episodes=st.lists(json_value, max_size=4),
    other=json_value,
)
def test_a_states_digest_from_its_pieces_is_its_texts(lib, episodes, other):
    from statepool_dagster.core.states.digest import (
        decode_noting_floats,
        pieces_digest,
        state_text_digest,
    )
    from statepool_dagster.core.states.models import decode_stored

    state = {"state_id": "x", "lib_snapshot": lib, "episodes": episodes, "analysis": other}
    text = json.dumps(state, ensure_ascii=False)
    pieces = [decode_noting_floats(json.dumps(v, ensure_ascii=False)) for v in [lib, *episodes]]
    for (value, _), original in zip(pieces, [lib, *episodes], strict=True):
        assert json.dumps(value) == json.dumps(decode_stored(json.dumps(original)))
    if all(plain for _, plain in pieces):
        found = pieces_digest(pieces[0][0], [value for value, _ in pieces[1:]])
        assert found is None or found == state_text_digest(text)


def test_a_states_digest_from_its_pieces_is_taken_only_where_it_is_exact():
    from statepool_dagster.core.states.digest import decode_noting_floats, pieces_digest

    library, plain = decode_noting_floats(b'{"cards": [{"card_id": "c", "w": 0.5}]}')
    assert plain and pieces_digest(library, []) is not None
    assert decode_noting_floats(b'{"w": 1e-05}')[1] is False  # json writes it another way
    value, plain = decode_noting_floats(b'{"w": NaN}')  # json's reading, never digested
    assert not plain and math.isnan(value["w"])


def test_the_digest_a_state_part_records_is_its_texts(tmp_path):
    from statepool_dagster.core.config import Settings
    from statepool_dagster.core.names import STATES
    from statepool_dagster.core.stages import build_run
    from statepool_dagster.core.states.digest import state_digest_hex, state_text_digest
    from statepool_dagster.core.store.layout import StoreLayout
    from statepool_dagster.core.store.reading import read_run_infos, read_run_table
    from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

    spec = SampleSpec(n_runs=1, n_checkpoints=3, n_cards=3, emb_dim=4, episodes_per_batch=2)
    generate_run(tmp_path / "runs" / "run000", spec, 0)
    settings = Settings(runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / "store"))
    build_run(settings, "run000")
    layout = StoreLayout(settings.store_dir)
    texts = read_run_table(layout, STATES, "run000")["state"].to_pylist()
    infos = [info for _, info in read_run_infos(layout, STATES, "run000")]
    assert len(infos) == len(texts) == 3
    for info, text in zip(infos, texts, strict=True):
        assert info["digest"] == state_text_digest(text).hex()
        # A store whose facts have none: the text's.
        bare = {k: v for k, v in info.items() if k != "digest"}
        assert state_digest_hex(bare, text) == info["digest"]
        assert state_digest_hex(bare) is None


@given(text, st.booleans())
def test_a_states_dataset_read_alone_is_the_parsed_states(dataset, assembled):
    from statepool_dagster.core.export.rows import state_dataset

    data = state_bytes("run_ckpt1", dataset, "{}", ["{}"], None, "r", [], {}, "surrogatepass")
    try:
        state_text = data.decode("utf-8")
    except UnicodeDecodeError:  # a lone surrogate: never a stored state
        return
    assert state_dataset(state_text, assembled) == str(json.loads(state_text)["dataset"])
