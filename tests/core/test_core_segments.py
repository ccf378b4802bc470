"""Append-only segments: many writer processes, one killed, sealed segments never overwritten."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from statepool_dagster.core.segments import SegmentWriter, iter_segment_lines, list_segments
from statepool_dagster.core.segments.reader import OversizeLine

_FORK = multiprocessing.get_context("fork")


def _write(folder: str, name: str, count: int, per_segment: int, pause: float) -> None:
    with SegmentWriter(folder, name, max_records=per_segment, max_age=3600) as writer:
        for i in range(count):
            writer.append({"writer": name, "i": i, "pad": "x" * 200})
            if pause:
                time.sleep(pause)


def _records(folder: Path) -> list[dict]:
    out = []
    for segment in list_segments(folder):
        out += [json.loads(line) for _, line in iter_segment_lines(segment.path)]
    return out


def test_writer_processes_at_once_and_one_killed_mid_segment(tmp_path: Path) -> None:
    folder = tmp_path / "segments"
    steady = [
        _FORK.Process(target=_write, args=(str(folder), f"w{k}", 120, 25, 0.0)) for k in range(4)
    ]
    doomed = _FORK.Process(target=_write, args=(str(folder), "doomed", 10_000, 10, 0.002))
    for p in [*steady, doomed]:
        p.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sealed = [s for s in list_segments(folder) if s.writer == "doomed"]
        tails = list(folder.glob(".doomed-*"))
        if len(sealed) >= 2 and tails:
            break
        time.sleep(0.01)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join()
    for p in steady:
        p.join()
        assert p.exitcode == 0
    assert list(folder.glob(".doomed-*")), "the killed writer's unsealed tail is on disk"

    records = _records(folder)
    keys = [(r["writer"], r["i"]) for r in records]
    assert len(keys) == len(set(keys)), "no record read twice"
    for k in range(4):
        assert sorted(i for w, i in keys if w == f"w{k}") == list(range(120))
    doomed_seen = sorted(i for w, i in keys if w == "doomed")
    # Only whole sealed segments: a prefix of its records, a multiple of its segment size.
    assert doomed_seen == list(range(len(doomed_seen)))
    assert doomed_seen and len(doomed_seen) % 10 == 0

    sealed_before = {s.name: s.path.read_bytes() for s in list_segments(folder)}
    _write(str(folder), "doomed", 15, 10, 0.0)  # the next writer of that name
    after = {s.name: s.path.read_bytes() for s in list_segments(folder)}
    assert all(after[n] == data for n, data in sealed_before.items()), "nothing overwritten"
    assert len(after) == len(sealed_before) + 2


def test_two_writers_with_one_name_never_overwrite(tmp_path: Path) -> None:
    a = SegmentWriter(tmp_path, "same", max_age=3600)
    b = SegmentWriter(tmp_path, "same", max_age=3600)
    a.append({"from": "a"})
    b.append({"from": "b"})
    assert a.seal() == "same-000000.jsonl"
    assert b.seal() == "same-000001.jsonl"
    assert sorted(r["from"] for r in _records(tmp_path)) == ["a", "b"]


def test_sealed_when_full_by_bytes_or_age_and_on_close(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path, "w", max_bytes=100, max_age=3600)
    w.append({"pad": "x" * 120})
    assert w.sealed == ["w-000000.jsonl"]
    w.append({"n": 1})
    assert len(list_segments(tmp_path)) == 1, "an open segment is not listed"
    w.max_age = 0.0
    w.append({"n": 2})
    assert len(list_segments(tmp_path)) == 2
    w.append({"n": 3})
    w.close()
    assert [r.get("n") for r in _records(tmp_path)] == [None, 1, 2, 3]
    with pytest.raises(ValueError, match="closed"):
        w.append({"n": 4})
    assert not list(tmp_path.glob(".*")), "no unsealed file left after close"


def test_a_record_holding_a_line_end_is_refused(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, "w") as w, pytest.raises(ValueError, match="one line"):
        w.append(b'{"a":\n1}')


def test_a_bad_writer_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid writer name"):
        SegmentWriter(tmp_path, "../up")


def test_an_overlong_line_is_skipped_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "w-000000.jsonl"
    path.write_bytes(b'{"a": 1}\n' + b"x" * 5000 + b"\n\n" + b'{"b": 2}\n')
    lines = list(iter_segment_lines(path, max_line=1000))
    assert lines[0] == (1, b'{"a": 1}')
    assert lines[1] == (2, OversizeLine(5001))
    assert lines[2] == (4, b'{"b": 2}')


def test_segments_through_an_fsspec_memory_url() -> None:
    url = f"memory://segments-{uuid.uuid4().hex}/s"
    with SegmentWriter(url, "w", max_records=2) as w:
        for i in range(5):
            w.append({"i": i})
            if i == 2:
                assert [s.name for s in list_segments(url)] == ["w-000000.jsonl"]
    segments = list_segments(url)
    assert [s.name for s in segments] == ["w-000000.jsonl", "w-000001.jsonl", "w-000002.jsonl"]
    with SegmentWriter(url, "w") as again:
        again.append({"i": 5})
    assert again.sealed == ["w-000003.jsonl"]
    read = [
        json.loads(line)["i"] for s in list_segments(url) for _, line in iter_segment_lines(s.path)
    ]
    assert read == [0, 1, 2, 3, 4, 5]


def test_segments_through_fsspec_local_url(tmp_path: Path) -> None:
    url = f"local://{tmp_path}/segs"
    with SegmentWriter(url, "w") as w:
        w.append({"i": 1})
    assert [s.name for s in list_segments(url)] == ["w-000000.jsonl"]
    assert (tmp_path / "segs" / "w-000000.jsonl").read_bytes() == b'{"i": 1}\n'


def test_an_idle_segment_is_sealed_at_its_age_limit_without_another_append(tmp_path: Path) -> None:
    writer = SegmentWriter(tmp_path, "idle", max_age=0.2)
    writer.append({"n": 1})
    deadline = time.monotonic() + 30
    while not list_segments(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [s.name for s in list_segments(tmp_path)] == ["idle-000000.jsonl"]
    writer.append({"n": 2})
    writer.close()
    assert [r["n"] for r in _records(tmp_path)] == [1, 2]
