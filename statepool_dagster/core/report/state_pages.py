"""Each state's page in the report: its source, prompt, history chart and the versions of its row.

States are written in shards, ``report/states/<k>.html``, ``k`` the FNV-1a hash of the
state id modulo the number of shards (a power of two, about 32 states a shard), each state
a section whose ``id`` is its state id. ``report/states/index.html`` finds one: it hashes
the id typed in and opens that shard at that anchor, with no server and no index to load,
so a page opens as fast at 100,000 states as at 10.

Built in a stream: the store's prompts (runs, then sessions), the feedback history
(``read_history``'s rows) and the pool versions the live pool kept are each read once,
their rows grouped by hash bucket, each few MB spilled to one temporary file; then each
shard's states are read back, joined and written. Memory holds one shard's states, the rows
not spilled, and the last row key of each state while the pool versions are read.

A report after a few runs changed (a sync that grew a run by a checkpoint) writes again only
the shards holding their states: ``.stamp`` beside the pages records what they were written
from, run by run, and each run's state ids; the other states' sections are copied from the
last pages as their bytes, the other shards linked. The HTML is :mod:`.state_html`'s.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..export.folder import StagedFolder
from ..feedback.stats_store import iter_history
from ..locations import AnyPath
from ..names import POOL_VERSIONS, PROMPTS
from ..segments.naming import parse_segment_name
from ..sessions.layout import stored_sessions
from ..store.atomic import read_parquet, temp_sibling
from ..store.layout import StoreLayout
from ..store.parts import RunTable
from ..store.reading import CheckpointBatches
from ..store.schemas import SCHEMAS
from .cache import code_digest, folders_stamp
from .numbers import store_runs
from .paths import SEARCH_PAGE
from .state_html import (
    PROMPT_SHOWN,
    EscapedPrompt,
    encode_page,
    encoded,
    render_search,
    section_pieces,
    shard_bytes,
    shard_pieces,
    shard_sections,
)

BUCKETS = 4096  # temporary files; the shards, a power of two, each take BUCKETS / shards
PER_SHARD = 32
_FLUSH_CHARS = 8 << 20
HISTORY_COLUMNS = ("step_first", "step_last", "draws", "answers", "score_mean", "score_var",
                   "ops_match_rate", "weight_std", "weight_pass_rate")  # fmt: skip
_encode_line = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder().decode
_BATCH = 16  # a run's checkpoints read at a time
_SIZES = struct.Struct("<II")  # a spilled row's JSON line and payload lengths


def fnv1a(text: str) -> int:
    """The 32-bit FNV-1a hash of ``text``'s UTF-8 bytes (the search page's script computes
    the same)."""
    h = 0x811C9DC5
    for byte in text.encode("utf-8", "surrogatepass"):
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def shard_count(states: int) -> int:
    """Shards for ``states`` states: the power of two giving about 32 a shard."""
    wanted = max(1, math.ceil(states / PER_SHARD))
    return min(BUCKETS, 1 << (wanted - 1).bit_length())


def shard_of(state_id: str, shards: int) -> int:
    return fnv1a(state_id) % shards


class _Buckets:
    """Rows grouped by hash bucket: a few MB held at a time, each batch beyond that spilled to
    one temporary file, its rows in bucket order with each bucket's offset kept, so a shard's
    rows are read back by seeking, one file open per spilled batch.

    A row is a JSON line and, for a state, its prompt as the page's bytes (escaped for HTML
    once, as it is read): the largest text of a page is never parsed again. In a spilled
    batch each row is its two lengths, then the two.
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.held: dict[int, list[tuple[bytes, bytes]]] = {}
        self.chars = 0
        self.spilled: list[tuple[Path, array]] = []

    def add(self, kind: str, state_id: str, value: Any, payload: bytes = b"") -> None:
        line = _encode_line([kind, state_id, value])
        self.held.setdefault(fnv1a(state_id) % BUCKETS, []).append((line, payload))
        self.chars += len(line) + len(payload)
        if self.chars > _FLUSH_CHARS:
            self.spill()

    def spill(self) -> None:
        path = self.folder / f"{len(self.spilled)}.rows"
        offsets = array("q", [0]) * (BUCKETS + 1)
        at = 0
        with open(path, "wb") as f:
            for bucket in range(BUCKETS):
                offsets[bucket] = at
                rows = self.held.get(bucket)
                if rows:
                    data = b"".join(
                        b"".join((_SIZES.pack(len(line), len(payload)), line, payload))
                        for line, payload in rows
                    )
                    f.write(data)
                    at += len(data)
            offsets[BUCKETS] = at
        self.spilled.append((path, offsets))
        self.held, self.chars = {}, 0

    def _rows(self, buckets: range) -> Iterator[tuple[bytes, bytes]]:
        """The rows of these buckets in the order they were added: spilled batches first."""
        for path, offsets in self.spilled:
            with open(path, "rb") as f:
                for bucket in buckets:
                    size = offsets[bucket + 1] - offsets[bucket]
                    if size:
                        f.seek(offsets[bucket])
                        data = memoryview(f.read(size))
                        at = 0
                        while at < size:
                            line_size, payload_size = _SIZES.unpack_from(data, at)
                            at += _SIZES.size
                            line = bytes(data[at : at + line_size])
                            at += line_size
                            yield line, bytes(data[at : at + payload_size])
                            at += payload_size
        for bucket in buckets:
            yield from self.held.get(bucket, ())

    def states(self, buckets: range) -> dict[str, dict[str, Any]]:
        """The states of these buckets, their rows joined."""
        found: dict[str, dict[str, Any]] = {}
        for line, payload in self._rows(buckets):
            kind, sid, value = _decode_line(line)
            state = found.setdefault(sid, {"history": [], "versions": []})
            if kind == "state":
                if "source" not in state:  # the first copy, as exports
                    # A null prompt has no length: the page says there is none.
                    missing = value.get("prompt_chars") is None
                    value["prompt"] = None if missing else EscapedPrompt(payload)
                    state["source"] = value
            elif kind == "history":  # a state's rows, in step order
                rows = (dict(zip(HISTORY_COLUMNS, r, strict=True)) for r in value)
                state[kind].extend(rows)
            else:
                state[kind].append(value)
        return found


def _prompts(
    layout: StoreLayout, kept: Path | None = None
) -> Iterator[tuple[str, dict[str, Any], bytes]]:
    """``(state id, its source, its prompt escaped for the page)`` of every run state, then
    every session state. With ``kept`` (a local store's folder), each run's come from what
    was kept there while its prompts table is the same, and are kept there when read."""
    runs = store_runs(layout)
    if kept is not None:
        for stale in set(_kept_runs(kept)) - set(runs):
            (kept / f"{stale}{_KEPT}").unlink(missing_ok=True)
    for run in runs:
        if kept is None:
            yield from _run_prompts(layout, run)
        else:
            yield from _kept_prompts(layout, run, kept)
    from ..export.sessions import iter_session_table

    for session in stored_sessions(layout.root):
        columns = ["state_id", "segment", "policy_step", "prompt"]
        for batch in iter_session_table(layout.root, session, "prompts", columns):
            for row, prompt in _shown(batch):
                parsed = parse_segment_name(row["segment"])
                source = {"session": session, "policy_step": row["policy_step"],
                          "writer": None if parsed is None else parsed[0],
                          "prompt_chars": row["prompt_chars"]}  # fmt: skip
                yield row["state_id"], source, prompt


def _run_prompts(layout: StoreLayout, run: str) -> Iterator[tuple[str, dict[str, Any], bytes]]:
    """A run's states, as :func:`_prompts` gives them, read from its prompts table."""
    prompts = CheckpointBatches(RunTable(layout.table(PROMPTS, run), SCHEMAS[PROMPTS]))
    try:
        for _, rows in prompts.batches(["state_id", "version", "prompt"], _BATCH):
            for row, prompt in _shown(rows):
                source = {"run": run, "checkpoint": row["version"],
                          "prompt_chars": row["prompt_chars"]}  # fmt: skip
                yield row["state_id"], source, prompt
    except FileNotFoundError:  # rebuilt meanwhile: the next report has it
        return
    finally:
        prompts.close()


_KEPT = ".kept"
_LENGTH = struct.Struct("<I")


def _kept_runs(kept: Path) -> list[str]:
    try:
        return [p.name[: -len(_KEPT)] for p in kept.iterdir() if p.name.endswith(_KEPT)]
    except FileNotFoundError:
        return []


def _kept_prompts(
    layout: StoreLayout, run: str, kept: Path
) -> Iterator[tuple[str, dict[str, Any], bytes]]:
    """A run's states from what ``kept`` holds for its prompts table as it is now; else read
    from the table, and kept as they pass (one state at a time: a run of any length)."""
    stamp = run_prompts_stamp(layout, run)
    path = kept / f"{run}{_KEPT}"
    try:
        held = path.open("rb")
    except FileNotFoundError:
        held = None
    if held is not None:
        with held:
            if _records_end(held, stamp):
                while record := _record(held):
                    yield msgspec.msgpack.decode(record)
                return
    kept.mkdir(parents=True, exist_ok=True)
    partial = temp_sibling(path)
    try:
        with partial.open("wb") as out:
            out.write(_framed(msgspec.msgpack.encode(stamp)))
            for row in _run_prompts(layout, run):
                out.write(_framed(msgspec.msgpack.encode(row)))
                yield row
        if run_prompts_stamp(layout, run) == stamp:  # not changed while it was read
            os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _framed(record: bytes) -> bytes:
    return _LENGTH.pack(len(record)) + record


def _record(handle: Any) -> bytes:
    """The next length-framed record of ``handle``; empty at its end."""
    head = handle.read(_LENGTH.size)
    return handle.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""


def _records_end(handle: Any, stamp: str) -> bool:
    """Whether ``handle`` holds records kept for ``stamp``, each whole to its end (checked
    by their lengths before any is read); left at its first record."""
    try:
        if msgspec.msgpack.decode(_record(handle)) != stamp:
            return False
    except msgspec.DecodeError:
        return False
    first, size = handle.tell(), os.fstat(handle.fileno()).st_size
    at = first
    while at < size:
        handle.seek(at)
        head = handle.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return False
        at += _LENGTH.size + _LENGTH.unpack(head)[0]
    handle.seek(first)
    return at == size


def _shown(rows: Any) -> list[tuple[dict[str, Any], bytes]]:
    """Each row without its prompt, with the prompt's length in ``prompt_chars``; and the
    prompt cut to :data:`PROMPT_SHOWN` characters in Arrow (a prompt of any size never
    becomes a Python string whole), escaped for HTML in its UTF-8 bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    prompts = rows["prompt"]
    names = [n for n in rows.column_names if n != "prompt"]
    out = {n: rows[n].to_pylist() for n in names}
    lengths = pc.utf8_length(prompts)
    out["prompt_chars"] = lengths.to_pylist()
    longest = pc.max(lengths).as_py()
    if longest is not None and longest > PROMPT_SHOWN:
        prompts = pc.utf8_slice_codeunits(prompts, 0, PROMPT_SHOWN)
    as_bytes = pa.large_binary() if pa.types.is_large_string(prompts.type) else pa.binary()
    texts = [b"" if b is None else _escape_utf8(b) for b in prompts.cast(as_bytes).to_pylist()]
    rows_out = [dict(zip(out, values, strict=True)) for values in zip(*out.values(), strict=True)]
    return list(zip(rows_out, texts, strict=True))


def _escape_utf8(text: bytes) -> bytes:
    """``html.escape`` of UTF-8 text, on its bytes (every character it replaces is ASCII)."""
    return (
        text.replace(b"&", b"&amp;")
        .replace(b"<", b"&lt;")
        .replace(b">", b"&gt;")
        .replace(b'"', b"&quot;")
        .replace(b"'", b"&#x27;")
    )


def _versions(root: AnyPath) -> Iterator[tuple[str, str, str]]:
    """``(state id, version, row key)`` each time a state's row key is new in the pool
    versions, oldest version first."""
    folder = root / POOL_VERSIONS
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".parquet"))
    except (FileNotFoundError, NotADirectoryError):
        return
    last: dict[str, str] = {}
    for name in names:
        try:
            table = read_parquet(folder / name, ["state_id", "row_key"])
        except FileNotFoundError:  # pruned meanwhile
            continue
        version = name.removesuffix(".parquet")
        keys = table["row_key"].to_pylist()
        for sid, key in zip(table["state_id"].to_pylist(), keys, strict=True):
            if last.get(sid) != key:
                last[sid] = key
                yield sid, version, key


PAGES_VERSION = "2"  # part of the stamp: a change to the pages' content bumps it
STAMP = ".stamp"


@dataclass(frozen=True)
class PagesStamp:
    """Digests of what the pages are read from: each run's prompt table, and the rest (the
    sessions' prompts, the fold's manifest, the pool versions, the code that draws them)."""

    runs: dict[str, str]
    rest: str
    sessions: bool  # whether the store has sessions


def run_prompts_stamp(layout: StoreLayout, run: str) -> str:
    """The stamp of a run's prompt table, as its kept prompts and the pages record it."""
    return folders_stamp(PAGES_VERSION, [layout.table(PROMPTS, run)])


def pages_stamp(layout: StoreLayout) -> PagesStamp | None:
    """What the pages are read from, as it is now; ``None`` for a store that is not a local
    folder (then always written)."""
    if not layout.local:
        return None
    from ..feedback.folders import MANIFEST, stats_folder
    from ..names import SESSION_PROMPTS

    sessions = stored_sessions(layout.root)
    folders = [layout.root / SESSION_PROMPTS / s for s in sessions]
    folders += [layout.root / POOL_VERSIONS, stats_folder(layout.root) / MANIFEST]
    drawing = code_digest("report.state_html", "report.state_pages", "report.svg", "words")
    return PagesStamp(
        runs={run: run_prompts_stamp(layout, run) for run in store_runs(layout)},
        rest=folders_stamp(f"{PAGES_VERSION}:{drawing}", folders),
        sessions=bool(sessions),
    )


@dataclass
class PagesRecord:
    """What the pages in a folder were written from and hold, kept beside them (``.stamp``):
    enough for the next report to write again only the shards a changed run's states are in."""

    states: int  # the states the pages hold
    runs: dict[str, str]  # PagesStamp.runs
    rest: str
    shards: int
    prompted: int  # states with a prompt (runs' and sessions')
    with_history: int  # states with feedback history
    ids: dict[str, list[str]]  # each run's state ids

    @classmethod
    def read(cls, folder: AnyPath) -> PagesRecord | None:
        try:
            return msgspec.json.decode((folder / STAMP).read_bytes(), type=cls)
        except (OSError, msgspec.MsgspecError):
            return None

    def write(self, folder: AnyPath) -> None:
        (folder / STAMP).write_bytes(msgspec.json.encode(self))

    def same_sources(self, other: PagesStamp | PagesRecord) -> bool:
        """Whether these pages were written from what ``other`` describes."""
        return self.runs == other.runs and self.rest == other.rest


def kept_pages(folder: AnyPath, stamp: PagesStamp | None) -> int | None:
    """How many states the pages in ``folder`` hold, when they were written from the files
    ``stamp`` describes; ``None``: write them again."""
    if stamp is None:
        return None
    record = PagesRecord.read(folder)
    return record.states if record is not None and record.same_sources(stamp) else None


def add_history(buckets: _Buckets, root: AnyPath, only: set[str] | None = None) -> int:
    """The feedback history's rows of each state (of those in ``only``), as one bucket row per
    state; how many states have some."""
    states = 0
    for table in iter_history(root):  # by state id: a state's rows together
        ids = table["state_id"].to_pylist()
        rows = list(zip(*(table[c].to_pylist() for c in HISTORY_COLUMNS), strict=True))
        start = 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or ids[end] != ids[start]:
                if only is None or ids[start] in only:
                    buckets.add("history", ids[start], rows[start:end])
                states += 1
                start = end
        del ids, rows
    return states


def add_versions(buckets: _Buckets, root: AnyPath, only: set[str] | None = None) -> None:
    """Each pool version that gave a state (of those in ``only``) a new row key."""
    for sid, version, key in _versions(root):
        if only is None or sid in only:
            buckets.add("versions", sid, [version, key])


def write_state_pages(
    layout: StoreLayout,
    folder: AnyPath,
    stamp: PagesStamp | None = None,
    kept: Path | None = None,
) -> int:
    """Write the shards and the search page into ``folder``; how many states they hold.

    ``kept``: a folder where each run's shown prompts are kept between reports, so that a
    report after one run changed reads that run's prompts table alone (a local store's).
    """
    ids: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="statepool-states-") as tmp:
        buckets = _Buckets(Path(tmp))
        prompted = 0
        for sid, source, prompt in _prompts(layout, kept if layout.local else None):
            buckets.add("state", sid, source, prompt)
            if "run" in source:
                ids.setdefault(source["run"], []).append(sid)
            prompted += 1
        with_history = add_history(buckets, layout.root)
        add_versions(buckets, layout.root)
        shards = shard_count(max(prompted, with_history))
        written = 0
        for k in range(shards):
            states = buckets.states(range(k, BUCKETS, shards))
            written += len(states)
            (folder / f"{k}.html").write_bytes(shard_bytes(k, shards, states))
        (folder / SEARCH_PAGE).write_bytes(encode_page(render_search(shards, written)))
    if stamp is not None:
        PagesRecord(written, stamp.runs, stamp.rest, shards, prompted, with_history, ids).write(
            folder
        )
    return written


def patch_state_pages(
    layout: StoreLayout, pages: StagedFolder, stamp: PagesStamp, kept: Path
) -> int | None:
    """The pages ``pages`` replaces, staged with only the shards that hold a state of a run
    whose prompts changed (or that came or went) written again, the others kept; how many
    states they hold. ``None`` (nothing written) where the pages must all be written:
    no record of ``earlier``'s, sessions, a changed fold, pool version or drawing code, another
    shard count, or a change reaching half the shards.

    A rewritten shard keeps the bytes of its other states' sections as ``earlier`` has them:
    the same as writing them anew, since what they show has not changed.
    """
    earlier, folder = pages.final, pages.path
    record = PagesRecord.read(earlier)
    if record is None or stamp.sessions or record.rest != stamp.rest:
        return None
    changed = sorted(r for r in record.runs.keys() | stamp.runs.keys()
                     if record.runs.get(r) != stamp.runs.get(r))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="statepool-states-") as tmp:
        buckets = _Buckets(Path(tmp))
        ids = {run: record.ids.get(run, []) for run in record.ids if run not in changed}
        gone = {sid for run in changed for sid in record.ids.get(run, ())}
        for run in changed:
            if run not in stamp.runs:
                (kept / f"{run}{_KEPT}").unlink(missing_ok=True)
                continue
            for sid, source, prompt in _kept_prompts(layout, run, kept):
                buckets.add("state", sid, source, prompt)
                ids.setdefault(run, []).append(sid)
        touched = gone | {sid for run in changed for sid in ids.get(run, ())}
        others = (sid for run, run_ids in ids.items() if run not in changed for sid in run_ids)
        if not touched.isdisjoint(others):  # an id in two runs: the first copy is a full write's
            return None
        prompted = sum(map(len, ids.values()))
        # The fold's manifest is part of ``rest``: the states with history are as recorded.
        shards = shard_count(max(prompted, record.with_history))
        redrawn = {shard_of(sid, shards) for sid in touched}
        if shards != record.shards or 2 * len(redrawn) > shards:
            return None
        add_history(buckets, layout.root, touched)
        add_versions(buckets, layout.root, touched)
        written = record.states
        for k in range(shards):
            name = f"{k}.html"
            if k not in redrawn:
                if not pages.keep(name):  # a page deleted by hand: all are written again
                    return None
                continue
            try:
                sections = shard_sections((earlier / name).read_bytes())
            except OSError:
                return None
            if sections is None:
                return None
            states = buckets.states(range(k, BUCKETS, shards))
            written -= len(sections)
            merged: dict[str, list[str | bytes] | bytes] = {
                sid: section for sid, section in sections.items() if sid not in touched
            }
            merged.update((sid, section_pieces(sid, state)) for sid, state in states.items())
            written += len(merged)
            pieces = shard_pieces(k, shards, (merged[sid] for sid in sorted(merged)))
            (folder / name).write_bytes(b"".join(encoded(pieces)))
    again = PagesRecord.read(earlier)
    if again is None or not again.same_sources(record):  # another report's pages swapped in
        return None
    (folder / SEARCH_PAGE).write_bytes(encode_page(render_search(shards, written)))
    PagesRecord(written, stamp.runs, stamp.rest, shards, prompted, record.with_history, ids).write(
        folder
    )
    return written
