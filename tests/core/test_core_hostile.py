"""Hostile inputs at the readers: the safe-open gate, json's own reading, the fast path's honesty.

Real files in ``tmp_path`` (FIFOs, sockets, symlinks); the original's reading
(``json.loads`` then each card's ``pop("_trigger_emb")``) is the reference the
snapshot reader is checked against, property by property.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statepool_dagster.core.errors import PromptInputError
from statepool_dagster.core.prompts.render import build_curator_prompt
from statepool_dagster.core.rejects import Reject
from statepool_dagster.core.runs.episodes import parse_episodes
from statepool_dagster.core.runs.json_read import (
    DEPTH_LIMIT,
    INT_DIGITS_LIMIT,
    blank_embeddings,
    loads,
)
from statepool_dagster.core.runs.opening import (
    RefusedFile,
    open_run_file,
    read_run_file,
    read_sidecars,
    run_notes,
)
from statepool_dagster.core.runs.snapshots import (
    FAST_PATH_BYTES,
    SnapshotFile,
    _parse_blanked,
    list_snapshots,
    parse_library,
    read_snapshot,
)
from statepool_dagster.core.stages.collect import read_run
from statepool_dagster.core.states.models import CheckpointState
from statepool_dagster.core.store.preview import PREVIEW_CELL_CHARS, markdown_preview
from statepool_dagster.core.store.rows import episode_row, episodes_table, snapshot_row


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) if the block takes longer than ``seconds``."""

    def _late(*_):
        raise TimeoutError(f"blocked for more than {seconds}s")

    previous = signal.signal(signal.SIGALRM, _late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _socket_at(path: Path) -> None:
    here = os.getcwd()
    os.chdir(path.parent)  # socket paths are limited to ~100 bytes: bind by a short name
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path.name)
        sock.close()
    finally:
        os.chdir(here)


def _refusal(path: Path, run: Path) -> str:
    with within(5), pytest.raises(RefusedFile) as caught:
        read_run_file(path, run)
    return caught.value.strerror


# --------------------------------------------------------------------------- the safe-open gate


def test_special_files_are_refused_without_blocking(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "fifo")
    _socket_at(run / "sock")
    (run / "dir").mkdir()
    assert "FIFO" in _refusal(run / "fifo", run)
    assert "socket" in _refusal(run / "sock", run)
    assert "directory" in _refusal(run / "dir", run)


def test_links_out_of_the_run_and_loops_are_refused_links_inside_are_read(tmp_path):
    run, outside = tmp_path / "runs" / "run", tmp_path / "outside"
    run.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("secret", encoding="utf-8")
    (run / "out").symlink_to(outside / "secret")
    (run / "dev").symlink_to("/dev/zero")
    (run / "loop").symlink_to(run / "loop")
    (run / "real").write_bytes(b"inside")
    (run / "in").symlink_to("real")
    assert "outside the run folder" in _refusal(run / "out", run)
    assert "outside the run folder" in _refusal(run / "dev", run)
    assert "symlink loop" in _refusal(run / "loop", run)
    assert read_run_file(run / "in", run) == b"inside"


def test_a_run_folder_that_is_a_symlink_is_read_through(tmp_path):
    real = tmp_path / "elsewhere" / "run"
    real.mkdir(parents=True)
    (real / "f").write_bytes(b"x")
    (tmp_path / "runs").mkdir()
    link = tmp_path / "runs" / "run"
    link.symlink_to(real, target_is_directory=True)
    assert read_run_file(link / "f", link) == b"x"
    assert run_notes(link)[0].startswith("run folder is a symlink")


def test_a_device_node_inside_the_run_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    try:
        os.mknod(run / "zero", 0o600 | 0o020000, os.makedev(1, 5))  # a character device
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    assert "character device" in _refusal(run / "zero", run)


def test_hostile_episodes_file_is_a_reject_and_a_note_not_no_episodes_yet(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").symlink_to(run / "episodes.jsonl")
    got = read_run(run)
    (reject,) = got.rejects
    assert reject.file == "run/episodes.jsonl" and "symlink loop" in reject.error
    assert any("episodes.jsonl is not read: a symlink loop" in n for n in run_notes(run))
    (run / "episodes.jsonl").unlink()
    os.mkfifo(run / "episodes.jsonl")
    with within(5):
        (reject,) = read_run(run).rejects
    assert "FIFO" in reject.error


def test_snapshot_and_sidecar_fifos_are_rejects_naming_the_file(tmp_path):
    run = tmp_path / "run"
    (run / "snapshots").mkdir(parents=True)
    (run / "analyses").mkdir()
    os.mkfifo(run / "snapshots" / "skills_v1.json")
    os.mkfifo(run / "analyses" / "analysis_v1.json")
    with within(5):
        read = read_run(run)
        sidecars = read_sidecars(run, "run")
    assert [(r.file, "FIFO" in r.error) for r in read.rejects] == [
        ("run/snapshots/skills_v1.json", True),
        ("run/analyses/analysis_v1.json", True),
    ]
    assert [(r.file, "FIFO" in r.error) for r in sidecars.rejects] == [
        ("run/analyses/analysis_v1.json", True)
    ]


def test_open_run_file_gives_a_blocking_descriptor_of_a_regular_file(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    fd = open_run_file(tmp_path / "f", tmp_path)
    try:
        assert os.read(fd, 10) == b"abc"
    finally:
        os.close(fd)


def test_a_snapshots_entry_that_is_no_folder_is_named_not_taken_for_no_checkpoints(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "snapshots").symlink_to(run / "snapshots")
    assert list_snapshots(run / "snapshots").ignored == {
        "snapshots/": "a symlink loop (not followed)"
    }
    assert "snapshots/ is not read: a symlink loop (not followed)" in run_notes(run)


# --------------------------------------------------------------------------- snapshot names


def test_only_ascii_digit_names_are_snapshots_the_rest_listed_with_a_reason(tmp_path):
    snaps = tmp_path / "snapshots"
    snaps.mkdir()
    names = ["skills_v1.json", "skills_v-1.json", "skills_v+2.json", "skills_v 4.json"]
    names += ["skills_v1_0.json", "skills_v\u0663.json", "skills_v99999999999999999999.json"]
    for name in names:
        (snaps / name).write_bytes(b'{"cards": []}')
    listing = list_snapshots(snaps)
    assert [s.version for s in listing.snapshots] == [1]
    assert set(listing.ignored) == set(names[1:])
    assert "ASCII digits" in listing.ignored["skills_v\u0663.json"]
    assert "out of range" in listing.ignored["skills_v99999999999999999999.json"]


# --------------------------------------------------------------------------- json's own reading


def test_episode_values_only_python_json_reads_are_kept_as_it_reads_them():
    data = (
        b'{"id": "a", "x": NaN, "y": Infinity, "z": -Infinity, "w": 1e999}\r'
        b'{"id": "b", "skill_lib_version": 2.0}\r\n'
        b'{"id": "c", "realtime": ' + b"9" * 400 + b"}\n"
    )
    got = parse_episodes(data, "r/episodes.jsonl")
    assert not got.rejects
    assert [(e.line, e.version) for e in got.episodes] == [(1, 0), (2, 2), (3, 0)]
    for episode, line in zip(got.episodes, data.decode().splitlines(), strict=True):
        assert json.dumps(episode.record) == json.dumps(json.loads(line))
    table = episodes_table([episode_row(e) for e in got.episodes])
    assert table["realtime"].to_pylist()[2] is None  # no float holds it; the record does
    assert json.loads(table["record"].to_pylist()[2])["realtime"] == int("9" * 400)
    assert got.notes == [
        "r/episodes.jsonl line 3: realtime does not fit a float; its column is empty (record kept)"
    ]


def test_vertical_tab_form_feed_line_is_a_reject_not_a_blank_line():
    got = parse_episodes(b'{"id": 1}\n\x0b\x0c\n \t\n', "r/episodes.jsonl")
    assert got.blank_lines == 1
    (reject,) = got.rejects
    assert (reject.line, reject.raw) == (2, "\x0b\x0c")
    with pytest.raises(json.JSONDecodeError):
        json.loads("\x0b\x0c")  # what the original's reader does with it


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("true", "must be an integer, got True"),
        ('"1"', "must be an integer, got '1'"),
        ("1.5", "must be an integer, got 1.5"),
        ("NaN", "must be an integer, got nan"),
        (str(2**63), "out of range"),
        (str(-(2**63) - 1), "out of range"),
    ],
)
def test_unusable_versions_are_rejects_naming_file_line_and_field(value, fragment):
    data = b'{"id": 0}\n{"skill_lib_version": ' + value.encode() + b"}\n"
    (reject,) = parse_episodes(data, "r/episodes.jsonl").rejects
    assert reject.describe().startswith("r/episodes.jsonl line 2: skill_lib_version")
    assert fragment in reject.error


def test_out_of_range_declared_version_keeps_the_library_and_empties_the_column(tmp_path):
    path = tmp_path / "snapshots" / "skills_v1.json"
    path.parent.mkdir()
    path.write_bytes(b'{"version": 100000000000000000000000, "cards": []}')
    snapshot = read_snapshot(SnapshotFile(1, path), "r/snapshots/skills_v1.json")
    row = snapshot_row(snapshot)
    assert row.declared_version is None
    assert row.library == '{"version": 100000000000000000000000, "cards": []}'


# --------------------------------------------------------------------------- depth limit


@pytest.mark.parametrize("depth", [DEPTH_LIMIT - 1, DEPTH_LIMIT, DEPTH_LIMIT + 1, 5000])
def test_one_depth_limit_whatever_the_stack(depth):
    """The same verdict at any call depth (the parsers' own limit moves with the stack)."""
    line = b'{"x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"

    def nested(levels: int):
        return nested(levels - 1) if levels else parse_episodes(line, "r").rejects

    verdicts = {len(nested(levels)) for levels in (0, 200, 400)}
    assert verdicts == {int(depth > DEPTH_LIMIT)}


def test_brackets_inside_strings_do_not_count_toward_depth():
    text = b'{"s": "' + b"[" * 2000 + b'", "t": "\\"' + b"{" * 2000 + b'"}'
    assert loads(text)["s"] == "[" * 2000


# --------------------------------------------------------------------------- card fields


@pytest.mark.parametrize(
    "card, problem",
    [
        ({"card_id": "c", "program": "p"}, "trigger is missing"),
        ({"card_id": "c", "trigger": 5, "program": "p"}, "trigger is not a string (got int)"),
        ({"card_id": "c", "trigger": "t", "program": {"p": 1}}, "program is not a string"),
        ({"trigger": "t", "program": "p"}, "card_id is missing"),
        ({"card_id": "c", "trigger": "t", "program": "p", "meta_info": 3}, "meta_info"),
    ],
)
def test_card_fields_keep_the_state_and_fail_only_its_prompt(card, problem):
    library = parse_library(json.dumps({"version": 1, "cards": [card]}).encode())
    assert library["cards"] == [card]  # kept exactly, as the original keeps it
    state = CheckpointState(
        state_id="r_ckpt1",
        dataset="ovo",
        lib_snapshot=library,
        episodes=[],
        analysis=None,
        last_receipt="(collected offline)",
    )
    with pytest.raises(PromptInputError, match=re.escape(problem)):
        build_curator_prompt(state)


# --------------------------------------------------------------------------- previews


def test_preview_cells_are_cut_the_event_log_never_gets_a_whole_field():
    table = pa.table({"response": ["x" * 1_000_000], "id": ["a|b"]})
    preview = markdown_preview(table, ["response", "id"])
    assert len(preview) < PREVIEW_CELL_CHARS + 200
    assert f"(+{1_000_000 - PREVIEW_CELL_CHARS} chars)" in preview and "a\\|b" in preview


# --------------------------------------------------------------------------- the fast path


def original_reading(data: bytes):
    """The original script's ``json.load`` + ``pop``; ``None`` where it fails."""
    try:
        library = json.loads(data.decode("utf-8"))
        for card in library.get("cards", []):
            card.pop("_trigger_emb", None)
    except (ValueError, AttributeError, TypeError, RecursionError):
        return None
    return library


KEY_SPELLINGS = [
    '"_trigger_emb"',
    '"\\u005ftrigger_emb"',
    '"_trigger\\u005femb"',
    '"\\u005F\\u0074rigger_emb"',
]
LOOK_ALIKES = ['"x_trigger_emb"', '"a\\"_trigger_emb"', '"_trigger_embx"', '"_TRIGGER_EMB"']
NUMBERS = ["0", "-0", "7", "-1.5", "1e5", "1E-5", "2.5e+10", "1e999", "-1e999", "NaN"]
NUMBERS += ["Infinity", "-Infinity", "123456789012345678901234567890", "0.000001"]
BAD_NUMBERS = ["+1", "01", "1.", ".5", "nan", "inf", "-NaN", "1NaN", "", "- 1", "0x1"]
WS = ["", " ", "\n", "\t", "\r\n", "  "]

ws = st.sampled_from(WS)
number = st.sampled_from(NUMBERS)
# outside embeddings mostly what msgspec reads too, so the fast path gets to answer
plain_number = st.sampled_from(["0", "7", "-1.5", "2.5e+10"] * 4 + NUMBERS)


@st.composite
def arrays(draw, valid: bool = True) -> str:
    items = draw(st.lists(number, max_size=5))
    if not valid:
        bad = draw(st.sampled_from(BAD_NUMBERS))
        items.insert(draw(st.integers(0, len(items))), bad)
    sep = draw(ws) + "," + draw(ws)
    return "[" + draw(ws) + sep.join(items) + draw(ws) + "]"


@st.composite
def strings(draw) -> str:
    text = draw(
        st.sampled_from(
            ["t", '\\"_trigger_emb\\": [1, 2]', "_trigger_emb", "a\\\\", "\\u005ftrigger_emb"]
        )
    )
    return '"' + text + '"'


@st.composite
def members(draw, depth: int = 0) -> list[str]:
    """Object members: look-alike keys, the key itself nested, strings holding the text."""
    out = []
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(LOOK_ALIKES * 2 + KEY_SPELLINGS + ['"note"', '"n"'] * 2))
        kind = draw(st.sampled_from(["array", "string", "number", "object"]))
        if kind == "object" and depth < 2:
            value = "{" + ",".join(draw(members(depth + 1))) + "}"
        elif kind == "string":
            value = draw(strings())
        elif kind == "number":
            value = draw(plain_number)
        else:
            value = draw(arrays(valid=draw(st.booleans()) or depth > 0))
        out.append(key + draw(ws) + ":" + draw(ws) + value)
    return out


@st.composite
def cards(draw) -> str:
    parts = ['"card_id": "c"', '"trigger": ' + draw(strings()), '"program": "p"']
    if draw(st.integers(0, 3)) == 0:
        parts.append('"meta_info": {' + ",".join(draw(members(1))) + "}")
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):  # the card's own, maybe twice
        key = draw(st.sampled_from(KEY_SPELLINGS[:1] * 8 + KEY_SPELLINGS))
        valid = draw(st.integers(0, 7)) > 0
        parts.append(key + draw(ws) + ":" + draw(ws) + draw(arrays(valid=valid)))
    if draw(st.integers(0, 3)) == 0:
        parts += draw(members())
    order = draw(st.permutations(parts))
    return "{" + draw(ws) + ("," + draw(ws)).join(order) + draw(ws) + "}"


@st.composite
def libraries(draw) -> bytes:
    parts = [
        '"version": ' + draw(number),
        '"cards": [' + ",".join(draw(st.lists(cards(), max_size=4))) + "]",
    ]
    if draw(st.booleans()):
        parts += draw(members())
    text = draw(ws) + "{" + ",".join(draw(st.permutations(parts))) + "}" + draw(ws)
    return text.encode("utf-8")


@settings(max_examples=400)
@given(data=libraries())
def test_snapshot_reader_equals_the_originals_reading_or_rejects_what_it_refuses(data):
    expected = original_reading(data)
    try:
        got = parse_library(data)
    except ValueError:
        assert expected is None or not isinstance(expected, dict), data
        return
    assert expected is not None, data
    # json.dumps: NaN compares unequal to itself; the text is what the state file holds
    assert json.dumps(got) == json.dumps(expected), data
    blanked = blank_embeddings(data)  # the fast path itself (big files take it): same, or none
    fast = None if blanked is None else _parse_blanked(*blanked)
    assert fast is None or json.dumps(fast) == json.dumps(expected), data


@st.composite
def clean_libraries(draw) -> bytes:
    """Ordinary files in every formatting: each card's own key, valid arrays, any number form."""
    cards = []
    for _ in range(draw(st.integers(1, 4))):
        parts = ['"card_id": "c"', '"trigger": ' + draw(strings()), '"program": "p"']
        parts.append('"_trigger_emb"' + draw(ws) + ":" + draw(ws) + draw(arrays()))
        cards.append("{" + draw(ws) + ("," + draw(ws)).join(draw(st.permutations(parts))) + "}")
    version = draw(st.sampled_from(["0", "7", "-1.5", "2.5e+10", "123456789012345678901234"]))
    text = '{"version": ' + version + ', "cards": [' + ("," + draw(ws)).join(cards) + "]}"
    return (draw(ws) + text + draw(ws)).encode()


@settings(max_examples=200)
@given(data=clean_libraries())
def test_fast_path_answers_ordinary_files_exactly(data):
    blanked = blank_embeddings(data)
    assert blanked is not None
    assert blanked[1] == len(re.findall(rb'"_trigger_emb"\s*:', data))  # every card's own
    fast = _parse_blanked(*blanked)
    assert fast is not None, data
    assert json.dumps(fast) == json.dumps(original_reading(data))


@pytest.mark.parametrize(
    "text",
    [
        # the card's own key escaped, a look-alike nested: the silent change
        '{"cards": [{"\\u005ftrigger_emb": [1], "card_id": "c", "trigger": "t", "program": "p",'
        ' "meta_info": {"_trigger_emb": [5, 6]}}, {"card_id": "d", "trigger": "t",'
        ' "program": "p", "_trigger_emb": [2]}]}',
        # a key that merely ends in the text, escaped quote before it
        '{"cards": [{"card_id": "c", "trigger": "t", "program": "p", "a\\"_trigger_emb": [3],'
        ' "_trigger_emb": [1]}]}',
        # the text in a string before a real key
        '{"note": "\\"_trigger_emb\\": [9]", "cards": [{"card_id": "c", "trigger": "t",'
        ' "program": "p", "_trigger_emb": [1]}]}',
    ],
)
def test_fast_path_traps_read_exactly_as_the_original(text):
    data = text.encode()
    assert json.dumps(parse_library(data)) == json.dumps(original_reading(data))
    big = data.replace(b'"cards"', b'"pad": "' + b"x" * FAST_PATH_BYTES + b'", "cards"')
    assert len(big) >= FAST_PATH_BYTES  # read through the fast path's checks
    assert json.dumps(parse_library(big)) == json.dumps(original_reading(big))


@pytest.mark.parametrize("array", ["[1,,2]", "[+1, 01]", "[nan, any]", "[1,]", "[-NaN]"])
def test_invalid_embedding_arrays_are_rejected_as_the_original_refuses_them(array):
    data = (
        '{"cards": [{"card_id": "c", "trigger": "t", "program": "p", "_trigger_emb": '
        + array
        + "}]}"
    ).encode()
    assert original_reading(data) is None
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_library(data)


# --------------------------------------------------------------------------- memory


MEMORY_PROBE = """
import resource, sys
from statepool_dagster.core.runs.episodes import parse_episodes
from statepool_dagster.core.store.preview import markdown_preview
from statepool_dagster.core.store.rows import episode_row, episodes_table
size = int(sys.argv[1])
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base = peak()
line = bytearray(b'{"id": "big", "skill_lib_version": 0, "response": "')
line += b"x" * size
line += b'"}\\n'
line = bytes(line)
got = parse_episodes(line, "r/episodes.jsonl")
rows = [episode_row(e) for e in got.episodes]
del got
table = episodes_table(rows)
del rows
preview = markdown_preview(table, ["id", "response"])
print(peak() - base, len(preview))
"""


def test_one_huge_line_peaks_within_a_few_times_its_size():
    """Reader, flat table and preview on one 50 MB line: 5.0x measured (README), 6x allowed.

    The line's bytes (1x, 2x while being built), its record, its ``json.dumps`` text
    (2x while encoding) and the table's two copies (``response`` and ``record``).
    """
    size = 50_000_000
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(size)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    grown, preview_chars = map(int, done.stdout.split())
    assert grown < 6 * size, grown / size
    assert preview_chars < 1000  # the preview holds a cut cell, never the field


# --------------------------------------------------------------------------- differential finds


def _seed_states(seed_module, run: Path, out: Path) -> dict[str, bytes]:
    seed_module.collect_from_run(str(run), str(out))
    return {p.name: p.read_bytes() for p in out.iterdir()}


def _our_states(run: Path) -> dict[str, bytes]:
    return {f"{j.state.state_id}.json": j.text.encode("utf-8") for j in read_run(run).states}


def test_a_rejected_line_holding_a_line_separator_keeps_one_reject_per_line(tmp_path, write_run):
    """U+2028 and NEL end a line for ``splitlines``: the rejects file escapes them."""
    run = write_run(
        tmp_path,
        "r",
        [{"id": "a", "skill_lib_version": 0}, '{"id": "x\u2028y", "skill_lib_version": ', "\x85"],
        {"skills_v1.json": {"cards": []}, "skills_v2.json": b'{"cards": [}'},
    )
    read = read_run(run)  # the snapshots stage reads back what the episodes stage wrote
    assert [(r.file, r.line) for r in read.rejects] == [
        ("r/episodes.jsonl", 2),
        ("r/episodes.jsonl", 3),
        ("r/snapshots/skills_v2.json", None),
    ]
    assert read.rejects[0].raw == '{"id": "x\u2028y", "skill_lib_version": '
    assert [j.version for j in read.states] == [1]


def test_python_only_numbers_in_a_library_give_the_originals_state(
    tmp_path, write_run, seed_module
):
    library = (
        b'{"version": 1, "score": NaN, "cards": [{"card_id": "c", "trigger": "t", '
        b'"program": "p", "meta_info": {"helped": Infinity, "x": -1e999}}]}'
    )
    run = write_run(
        tmp_path,
        "r",
        [{"id": "a", "skill_lib_version": 0}, {"id": "b", "skill_lib_version": 1}],
        {"skills_v1.json": library, "skills_v2.json": library},
    )
    expected = _seed_states(seed_module, run, tmp_path / "seed")
    assert sorted(expected) == ["r_ckpt1.json", "r_ckpt2.json"]
    assert _our_states(run) == expected


def test_spellings_of_one_version_keep_the_file_the_original_reads_last(
    tmp_path, write_run, seed_module
):
    """It reads the names in sorted order and the last write of a state stays."""
    snapshots = {
        name: {"version": 0, "cards": [card]}
        for name, card in (
            ("skills_v0.json", {"card_id": "v0"}),
            ("skills_v00.json", {"card_id": "v00"}),
            ("skills_v007.json", {"card_id": "v007"}),
            ("skills_v07.json", {"card_id": "v07"}),
            ("skills_v003.json", {"card_id": "v003"}),
            ("skills_v03.json", {"card_id": "v03"}),
            ("skills_v3.json", {"card_id": "v3"}),
        )
    }
    run = write_run(tmp_path, "r", [{"id": "a", "skill_lib_version": 0}] * 2, snapshots)
    (run / "episodes.jsonl").write_bytes(
        b'{"id": "a", "skill_lib_version": 2}\n{"id": "b", "skill_lib_version": 6}\n'
        b'{"id": "c", "skill_lib_version": 0}\n'
    )
    expected = _seed_states(seed_module, run, tmp_path / "seed")
    assert sorted(expected) == ["r_ckpt0.json", "r_ckpt3.json", "r_ckpt7.json"]
    assert _our_states(run) == expected
    ignored = list_snapshots(run / "snapshots").ignored
    assert ignored == {
        "skills_v0.json": "duplicate of version 0 (skills_v00.json)",
        "skills_v003.json": "duplicate of version 3 (skills_v3.json)",
        "skills_v007.json": "duplicate of version 7 (skills_v07.json)",
        "skills_v03.json": "duplicate of version 3 (skills_v3.json)",
    }


@pytest.mark.parametrize("cards", [{}, ""])
def test_cards_the_original_iterates_as_none_keep_its_state(
    tmp_path, write_run, seed_module, cards
):
    run = write_run(
        tmp_path,
        "r",
        [{"id": "a", "skill_lib_version": 0}],
        {"skills_v1.json": {"version": 1, "cards": cards, "_trigger_emb": [1]}},
    )
    expected = _seed_states(seed_module, run, tmp_path / "seed")
    assert list(expected) == ["r_ckpt1.json"]
    assert _our_states(run) == expected
    state = CheckpointState.from_json(expected["r_ckpt1.json"])
    prompt = build_curator_prompt(state)
    assert "(empty library)" in prompt
    with pytest.raises(ValueError, match="cards is not a list of objects"):
        parse_library(b'{"cards": {"a": 1}}')  # the original fails on any other non-list


def test_a_lone_surrogate_in_a_library_or_analysis_is_a_reject_not_a_failed_run(
    tmp_path, write_run
):
    run = write_run(
        tmp_path,
        "r",
        [{"id": "a", "skill_lib_version": 1}],
        {
            "skills_v1.json": b'{"cards": [{"card_id": "\\ud800"}]}',
            "skills_v2.json": {"cards": []},
        },
    )
    (run / "analyses").mkdir()
    (run / "analyses" / "analysis_v2.json").write_bytes(b'{"summary": "\\udfff"}')
    read = read_run(run)
    error = "not storable as UTF-8: a lone surrogate escape in a string"
    assert [(r.file, r.error) for r in read.rejects] == [
        ("r/snapshots/skills_v1.json", error),
        ("r/analyses/analysis_v2.json", error),
    ]
    assert [j.version for j in read.states] == [2]


def test_a_file_name_that_is_not_utf8_is_listed_escaped_in_the_report(tmp_path, write_run):
    from statepool_dagster.core.config import Settings
    from statepool_dagster.core.report.write import write_report
    from statepool_dagster.core.stages import build_run

    run = write_run(tmp_path / "runs", "r", [{"id": "a"}], {"skills_v1.json": {"cards": []}})
    with open(os.path.join(os.fsencode(run / "snapshots"), b"skills_v\xff.json"), "wb") as f:
        f.write(b"{}")
    settings = Settings(runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / "store"))
    build_run(settings, "r")
    overview = write_report(settings.store_dir, runs_dir=settings.runs_dir)
    page = (overview.parent / "runs" / "r.html").read_text("utf-8")  # the run's own page
    assert "skills_v\\udcff.json" in page


def test_a_declared_version_the_column_cannot_hold_is_a_note_naming_the_file(tmp_path, write_run):
    from statepool_dagster.core.config import Settings
    from statepool_dagster.core.names import SNAPSHOTS
    from statepool_dagster.core.stages import build_run

    write_run(
        tmp_path / "runs",
        "r",
        [{"id": "a"}],
        {
            "skills_v1.json": b'{"version": 100000000000000000000000, "cards": []}',
            "skills_v2.json": b'{"version": 2.0, "cards": []}',
            "skills_v3.json": b'{"version": 3, "cards": []}',
        },
    )
    settings = Settings(runs_dir=str(tmp_path / "runs"), store_dir=str(tmp_path / "store"))
    for reused in (0, 3):  # built, then every snapshot reused: the notes stay
        report = build_run(settings, "r", [SNAPSHOTS])[SNAPSHOTS]
        assert report.reused == reused
        note = "version is not a 64-bit integer ({}); its column is empty"
        assert [n for n in report.notes if "version is not" in n] == [
            f"r/snapshots/skills_v1.json: {note.format('int')}",
            f"r/snapshots/skills_v2.json: {note.format('float')}",
        ]


@pytest.mark.parametrize("big", [False, True], ids=["small", "fast-path-size"])
@pytest.mark.parametrize(
    "text",
    [
        # bytes that are not UTF-8 where the reader skips the value unbuilt: the original's
        # text-mode open() dies on them (UnicodeDecodeError) wherever they are
        b'{"cards": [{"card_id": "c", "_trigger_emb": "\xff"}]}',
        b'{"cards": [{"card_id": "c", "_trigger_emb": {"a": ["caf\xe9"]}}]}',
        b'{"cards": [{"card_id": "c", "_trigger_emb": [1, "\xc0\xaf"]}]}',
        b'{"cards": [{"card_id": "c", "_trigger_emb": {"\xed\xa0\x80": 1}}]}',
        # a duplicate member: the first value is overwritten, never built, still read by json
        b'{"cards": [{"card_id": "c", "_trigger_emb": "\xff", "_trigger_emb": [1]}]}',
        b'{"cards": [{"card_id": "\xff", "card_id": "c"}]}',
        b'{"cards": [{"trigger": "\xfe"}], "cards": []}',
        b'{"version": "\xff", "version": 1, "cards": []}',
    ],
)
def test_bytes_not_utf8_anywhere_in_a_snapshot_are_a_reject_as_the_original_dies(
    tmp_path, text, big
):
    if big:
        text = text.replace(b'"cards"', b'"pad": "' + b"x" * FAST_PATH_BYTES + b'", "cards"', 1)
    snaps = tmp_path / "run" / "snapshots"
    snaps.mkdir(parents=True)
    path = snaps / "skills_v1.json"
    path.write_bytes(text)
    # the original's own reading of the file
    with pytest.raises(UnicodeDecodeError), open(path, encoding="utf-8") as f:
        json.load(f)
    got = read_snapshot(SnapshotFile(1, path), "run/snapshots/skills_v1.json")
    assert isinstance(got, Reject), got
    assert "not UTF-8" in got.error


LONG = b"7" * (INT_DIGITS_LIMIT + 1)  # one digit past Python's integer limit: json refuses it


@pytest.mark.parametrize("big", [False, True], ids=["small", "fast-path-size"])
@pytest.mark.parametrize(
    "text",
    [
        # a member a later duplicate overwrites: never built, still read by json
        b'{"cards": [{"card_id": ' + LONG + b', "card_id": "c"}]}',
        b'{"version": ' + LONG + b', "version": 1, "cards": []}',
        b'{"cards": [{"card_id": "c", "_trigger_emb": [1], "_trigger_emb": [' + LONG + b"]}]}",
        # the embedding itself, dropped unread: an array, nested, or not an array
        b'{"cards": [{"card_id": "c", "_trigger_emb": [0.5, ' + LONG + b"]}]}",
        b'{"cards": [{"card_id": "c", "_trigger_emb": [[-' + LONG + b"]]}]}",
        b'{"cards": [{"card_id": "c", "_trigger_emb": {"x": ' + LONG + b"}}]}",
    ],
)
def test_an_integer_past_the_digit_limit_anywhere_in_a_snapshot_is_a_reject(tmp_path, text, big):
    if big:
        text = text.replace(b'"cards"', b'"pad": "' + b"x" * FAST_PATH_BYTES + b'", "cards"', 1)
    snaps = tmp_path / "run" / "snapshots"
    snaps.mkdir(parents=True)
    path = snaps / "skills_v1.json"
    path.write_bytes(text)
    # the original's own reading of the file
    with (
        pytest.raises(ValueError, match=f"{INT_DIGITS_LIMIT} digits"),
        open(path, encoding="utf-8") as f,
    ):
        json.load(f)
    got = read_snapshot(SnapshotFile(1, path), "run/snapshots/skills_v1.json")
    assert isinstance(got, Reject), got
    assert f"{INT_DIGITS_LIMIT} digits" in got.error


def test_long_digit_runs_that_are_no_integer_are_read_as_the_original_reads_them():
    fraction, string = b"0." + LONG, b'"' + LONG + b'"'
    for value in (fraction, string, b"-" + b"9" * INT_DIGITS_LIMIT):
        data = b'{"cards": [{"card_id": "c", "n": ' + value + b', "_trigger_emb": [1]}]}'
        assert json.dumps(parse_library(data)) == json.dumps(original_reading(data))


@settings(max_examples=300)
@given(data=libraries(), splice=st.data())
def test_snapshot_reader_with_stray_bytes_and_long_integers_anywhere(data, splice):
    """A byte that is not UTF-8 or a digit run past Python's limit, spliced in anywhere
    (inside an embedding or a member a duplicate overwrites too): the original's reading
    or a reject, never a library the original refuses."""
    at = splice.draw(st.integers(0, len(data)))
    token = splice.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", LONG, b"-" + LONG]))
    data = data[:at] + token + data[at:]
    expected = original_reading(data)
    try:
        got = parse_library(data)
    except ValueError:
        assert expected is None or not isinstance(expected, dict), data
        return
    assert isinstance(expected, dict), data
    assert json.dumps(got) == json.dumps(expected), data
