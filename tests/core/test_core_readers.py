"""Reading episodes.jsonl line by line and snapshot files whole, setting bad records aside."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statepool_dagster.core.errors import BadRecordError, StatepoolError
from statepool_dagster.core.rejects import Reject
from statepool_dagster.core.runs.episodes import read_episodes
from statepool_dagster.core.runs.snapshots import SnapshotFile, parse_library, read_snapshot
from statepool_dagster.core.stages.collect import read_run

GOOD_CARD = {"card_id": "c1", "trigger": "when", "program": "do"}


def read(tmp_path: Path, data: bytes, strict: bool = False):
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(data)
    return read_episodes(path, "r/episodes.jsonl", strict=strict)


def lines_in(data: bytes) -> int:
    """Lines as the original's text-mode ``open()`` sees them (universal newlines)."""
    if not data:
        return 0
    lines = re.split(rb"\r\n|\r|\n", data)
    return len(lines) - (lines[-1] == b"")


# --------------------------------------------------------------------------- episodes


def test_episode_line_numbers_are_1_based_and_blank_lines_are_skipped_and_counted(tmp_path):
    data = b'{"id": 1}\n\n{"id": 2}\n   \t \n{"id": 3}\n\r\n'
    got = read(tmp_path, data)
    assert [(e.line, e.record["id"]) for e in got.episodes] == [(1, 1), (3, 2), (5, 3)]
    assert got.blank_lines == 3
    assert got.rejects == []


def test_episode_record_is_kept_as_read_with_its_version(tmp_path):
    data = b'{"b": [1, 2.5], "skill_lib_version": 4, "a": "\xc3\xa9"}\n'
    (episode,) = read(tmp_path, data).episodes
    assert episode.version == 4
    assert episode.record == {"b": [1, 2.5], "skill_lib_version": 4, "a": "é"}
    assert list(episode.record) == ["b", "skill_lib_version", "a"]


def test_invalid_json_line_becomes_a_reject_with_file_line_error_and_raw(tmp_path):
    got = read(tmp_path, b'{"id": 1}\n{"id": 2,,}\n{"id": 3}\n')
    assert [e.line for e in got.episodes] == [1, 3]
    (reject,) = got.rejects
    assert reject.file == "r/episodes.jsonl"
    assert reject.line == 2
    assert reject.raw == '{"id": 2,,}'
    assert "JSON" in reject.error


@pytest.mark.parametrize("line", [b"[1, 2]", b'"text"', b"3", b"null", b"true"])
def test_json_line_that_is_not_an_object_becomes_a_reject(tmp_path, line):
    got = read(tmp_path, line + b"\n")
    assert got.episodes == []
    (reject,) = got.rejects
    assert reject.line == 1 and reject.raw == line.decode()
    assert "object" in reject.error


@pytest.mark.parametrize(
    "value", ['"3"', "3.5", "true", "false", "null", "[3]", "NaN", "1e300", str(2**63)]
)
def test_non_integer_skill_lib_version_becomes_a_reject(tmp_path, value):
    line = f'{{"id": "e", "skill_lib_version": {value}}}'.encode()
    got = read(tmp_path, b'{"id": "ok", "skill_lib_version": 1}\n' + line + b"\n")
    assert [e.record["id"] for e in got.episodes] == ["ok"]
    (reject,) = got.rejects
    assert reject.line == 2
    assert "skill_lib_version" in reject.error
    assert reject.raw == line.decode()


@pytest.mark.parametrize("value", [0, 7, -1, 2**63 - 1, -(2**63)])
def test_integer_skill_lib_version_is_accepted(tmp_path, value):
    (episode,) = read(tmp_path, json.dumps({"skill_lib_version": value}).encode()).episodes
    assert episode.version == value


def test_invalid_utf8_bytes_are_escaped_in_the_reject_raw_not_lost(tmp_path):
    got = read(tmp_path, b'{"q": "caf\xe9 \xff\xfe"}\n\x80\x81 garbage\n')
    assert [r.line for r in got.rejects] == [1, 2]
    assert got.rejects[0].raw == '{"q": "caf\\xe9 \\xff\\xfe"}'
    assert got.rejects[1].raw == "\\x80\\x81 garbage"


def test_final_line_without_newline_that_parses_is_kept(tmp_path):
    got = read(tmp_path, b'{"id": 1}\n{"id": 2, "skill_lib_version": 0}')
    assert [(e.line, e.record["id"]) for e in got.episodes] == [(1, 1), (2, 2)]
    assert got.rejects == []


def test_final_line_without_newline_that_does_not_parse_is_a_reject(tmp_path):
    got = read(tmp_path, b'{"id": 1}\n{"id": 2, "questi')
    assert [e.line for e in got.episodes] == [1]
    (reject,) = got.rejects
    assert (reject.line, reject.raw) == (2, '{"id": 2, "questi')


def test_crlf_line_endings_are_read_like_lf(tmp_path):
    got = read(tmp_path, b'{"id": 1}\r\n{"id": 2}\r\n')
    assert [e.record for e in got.episodes] == [{"id": 1}, {"id": 2}]
    assert got.rejects == []


def test_strict_mode_raises_bad_record_error_naming_file_and_line(tmp_path):
    with pytest.raises(BadRecordError) as err:
        read(tmp_path, b'{"id": 1}\n\n{"id": 3, "skill_lib_version": "3"}\n', strict=True)
    assert "r/episodes.jsonl" in str(err.value)
    assert "line 3" in str(err.value)
    assert isinstance(err.value, StatepoolError)


def test_parsed_plus_rejected_plus_blank_equals_lines_in_file(tmp_path):
    data = b'{"id": 1}\n\nnot json\n{"skill_lib_version": true}\n  \n[]\n{"id": 2}'
    got = read(tmp_path, data)
    assert (len(got.episodes), len(got.rejects), got.blank_lines) == (2, 3, 2)
    assert got.lines == lines_in(data) == 7


def test_deeply_nested_line_is_a_reject_not_a_crash(tmp_path):
    data = b'{"id": 1}\n' + b"[" * 50_000 + b"\n" + b'{"a":' * 5_000 + b"1" + b"}" * 5_000 + b"\n"
    got = read(tmp_path, data)
    assert [e.line for e in got.episodes] == [1]
    assert [r.line for r in got.rejects] == [2, 3]
    with pytest.raises(BadRecordError, match="line 2"):
        read(tmp_path, data, strict=True)


# --------------------------------------------------------------------------- snapshots

BAD_SNAPSHOTS = {
    "not_json": (b"{this is not json", "JSON"),
    "not_an_object": (b'[{"card_id": "c1"}]', "object"),
    "cards_not_a_list": (b'{"version": 1, "cards": {"c1": {}}}', "cards"),
    "card_not_an_object": (b'{"version": 1, "cards": ["c1"]}', "cards"),
    "deeply_nested": (b'{"version": ' + b'{"a":' * 5_000 + b"1" + b"}" * 5_001, ""),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_bad_snapshot_becomes_a_whole_file_reject_and_the_others_are_unaffected(
    tmp_path, write_run, case
):
    data, mentioned = BAD_SNAPSHOTS[case]
    run = write_run(
        tmp_path,
        "r",
        [{"id": "a", "skill_lib_version": 0}, {"id": "b", "skill_lib_version": 1}],
        {
            "skills_v0.json": {"version": 0, "cards": [GOOD_CARD]},
            "skills_v1.json": data,
            "skills_v2.json": {"version": 2, "cards": []},
        },
    )
    got = read_run(run)
    (reject,) = got.rejects
    assert reject.file == "r/snapshots/skills_v1.json"
    assert reject.line is None
    assert mentioned in reject.error
    assert reject.raw is not None and reject.raw.startswith(data[:20].decode())
    assert [j.library_version for j in got.states] == [0, 2]
    assert {j.version: [e["id"] for e in j.state.episodes] for j in got.states} == {
        0: ["a"],
        2: ["b"],
    }
    assert got.rejects == [reject]


def test_strict_mode_raises_bad_record_error_naming_the_snapshot_file(tmp_path):
    path = tmp_path / "skills_v4.json"
    path.write_bytes(b'{"cards": [{"card_id": "c1"}')
    with pytest.raises(BadRecordError, match=r"r/snapshots/skills_v4\.json"):
        read_snapshot(SnapshotFile(4, path), "r/snapshots/skills_v4.json", strict=True)
    assert isinstance(read_snapshot(SnapshotFile(4, path), "x"), Reject)


def test_good_snapshot_reads_back_without_embeddings(tmp_path):
    path = tmp_path / "skills_v4.json"
    path.write_bytes(
        json.dumps({"version": 4, "cards": [{**GOOD_CARD, "_trigger_emb": [1.0]}]}).encode()
    )
    snapshot = read_snapshot(SnapshotFile(4, path), "r/snapshots/skills_v4.json")
    assert snapshot.version == 4 and snapshot.file == "r/snapshots/skills_v4.json"
    assert snapshot.library == {"version": 4, "cards": [GOOD_CARD]}


# --------------------------------------------------------------------------- properties

JSON_PIECES = [bytes([c]) for c in b'{}[]":,\n\r \\1-.e\x00\xff'] + [
    b"null",
    b"true",
    b"NaN",
    b'"skill_lib_version"',
    b'"cards"',
    "é".encode(),
    "日".encode()[:2],  # a cut multi-byte character
]
JSON_BYTES = st.lists(st.sampled_from(JSON_PIECES), max_size=60).map(b"".join)
RANDOM_BYTES = st.one_of(st.binary(max_size=400), JSON_BYTES)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
versions = st.one_of(st.integers(), json_scalars, st.lists(st.integers(), max_size=2))
episode_like = st.one_of(
    st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    st.builds(
        lambda d, v: {**d, "skill_lib_version": v},
        st.dictionaries(st.text(max_size=8), json_values, max_size=4),
        versions,
    ),
    json_values,
)
FAST = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("property")


@FAST
@given(data=RANDOM_BYTES)
def test_random_bytes_never_crash_read_episodes_nor_lose_a_line(scratch, data):
    got = read(scratch, data)
    assert got.lines == lines_in(data)
    assert len(got.episodes) + len(got.rejects) + got.blank_lines == lines_in(data)
    numbers = sorted([e.line for e in got.episodes] + [r.line for r in got.rejects])
    assert len(set(numbers)) == len(numbers) and all(1 <= n <= lines_in(data) for n in numbers)
    try:
        read(scratch, data, strict=True)
    except StatepoolError:
        assert got.rejects
    else:
        assert not got.rejects


@FAST
@given(values=st.lists(episode_like, max_size=8), blanks=st.lists(st.booleans(), max_size=8))
def test_random_json_lines_are_classified_as_the_seed_reads_them_and_none_lost(
    scratch, values, blanks
):
    lines: list[bytes] = []
    expected_records = []
    for i, value in enumerate(values):
        if i < len(blanks) and blanks[i]:
            lines.append(b"")
        lines.append(json.dumps(value, ensure_ascii=i % 2 == 0).encode("utf-8"))
        version = value.get("skill_lib_version", 0) if isinstance(value, dict) else None
        if type(version) is float and version.is_integer():
            version = int(version)  # 1.0 pairs with skills_v1.json in the original too
        if type(version) is int and -(2**63) <= version < 2**63:
            expected_records.append(value)
    data = b"\n".join(lines) + b"\n"
    got = read(scratch, data)
    assert len(got.episodes) + len(got.rejects) + got.blank_lines == lines_in(data)
    assert len(got.episodes) == len(expected_records)
    for episode, record in zip(got.episodes, expected_records, strict=True):
        # Same values as json.loads gives the seed, exactly (floats and key order included).
        assert json.dumps(episode.record) == json.dumps(record)
        assert episode.version == int(record.get("skill_lib_version", 0))


@FAST
@given(data=RANDOM_BYTES)
def test_random_bytes_to_parse_library_raise_only_value_error(data):
    try:
        library = parse_library(data)
    except ValueError:
        return
    assert isinstance(library, dict)


@FAST
@given(
    library=st.dictionaries(st.text(max_size=6), json_values, max_size=4), cards=st.integers(0, 3)
)
def test_random_libraries_parse_as_json_loads_minus_embeddings(library, cards):
    library = {
        **library,
        "cards": [{**GOOD_CARD, "_trigger_emb": [0.5] * i, "n": i} for i in range(cards)],
    }
    parsed = parse_library(json.dumps(library, ensure_ascii=False).encode("utf-8"))
    expected = {
        k: [{ck: cv for ck, cv in c.items() if ck != "_trigger_emb"} for c in v]
        if k == "cards"
        else v
        for k, v in library.items()
    }
    assert json.dumps(parsed) == json.dumps(expected)
