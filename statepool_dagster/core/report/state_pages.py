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
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from array import array
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import msgspec

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
from ..words import plural
from . import svg
from .cache import folders_stamp
from .numbers import store_runs
from .paths import SEARCH_PAGE, STATES_FOLDER

BUCKETS = 4096  # temporary files; the shards, a power of two, each take BUCKETS / shards
PER_SHARD = 32
_FLUSH_CHARS = 8 << 20
HISTORY_COLUMNS = ("step_first", "step_last", "draws", "answers", "score_mean", "score_var",
                   "ops_match_rate", "weight_std", "weight_pass_rate")  # fmt: skip
_encode_line = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder().decode
_BATCH = 16  # a run's checkpoints read at a time
_SIZES = struct.Struct("<II")  # a spilled row's JSON line and payload lengths
PROMPT_SHOWN = 100_000  # characters of a prompt a page shows (the store holds it whole)


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
                    value["prompt"] = None if missing else _Escaped(payload)
                    state["source"] = value
            elif kind == "history":  # a state's rows, in step order
                rows = (dict(zip(HISTORY_COLUMNS, r, strict=True)) for r in value)
                state[kind].extend(rows)
            else:
                state[kind].append(value)
        return found


class _Escaped(bytes):
    """A prompt already escaped for HTML and encoded as the page is (its first
    :data:`PROMPT_SHOWN` characters at most)."""


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
    table = layout.table(PROMPTS, run)
    stamp = folders_stamp(PAGES_VERSION, [table])
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
        if folders_stamp(PAGES_VERSION, [table]) == stamp:  # not changed while it was read
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


def pages_stamp(layout: StoreLayout) -> str | None:
    """A digest of what the pages are read from (the prompt tables, the fold's manifest, the
    pool versions); ``None`` for a store that is not a local folder (then always written)."""
    if not layout.local:
        return None
    from ..feedback.folders import MANIFEST, stats_folder
    from ..names import SESSION_PROMPTS

    folders = [layout.table(PROMPTS, run) for run in store_runs(layout)]
    folders += [layout.root / SESSION_PROMPTS / s for s in stored_sessions(layout.root)]
    folders += [layout.root / POOL_VERSIONS, stats_folder(layout.root) / MANIFEST]
    return folders_stamp(PAGES_VERSION, folders)


def kept_pages(folder: AnyPath, stamp: str | None) -> int | None:
    """How many states the pages in ``folder`` hold, when they were written from the files
    ``stamp`` describes; ``None``: write them again."""
    if stamp is None:
        return None
    try:
        kept = json.loads((folder / STAMP).read_bytes())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return kept.get("states") if kept.get("stamp") == stamp else None


def write_state_pages(
    layout: StoreLayout, folder: AnyPath, stamp: str | None = None, kept: Path | None = None
) -> int:
    """Write the shards and the search page into ``folder``; how many states they hold.

    ``kept``: a folder where each run's shown prompts are kept between reports, so that a
    report after one run changed reads that run's prompts table alone (a local store's).
    """
    with tempfile.TemporaryDirectory(prefix="statepool-states-") as tmp:
        buckets = _Buckets(Path(tmp))
        count = 0
        for sid, source, prompt in _prompts(layout, kept if layout.local else None):
            buckets.add("state", sid, source, prompt)
            count += 1
        with_history = 0
        for table in iter_history(layout.root):  # by state id: a state's rows together
            ids = table["state_id"].to_pylist()
            rows = list(zip(*(table[c].to_pylist() for c in HISTORY_COLUMNS), strict=True))
            start = 0
            for end in range(1, len(ids) + 1):
                if end == len(ids) or ids[end] != ids[start]:
                    buckets.add("history", ids[start], rows[start:end])
                    with_history += 1
                    start = end
            del ids, rows
        count = max(count, with_history)
        for sid, version, key in _versions(layout.root):
            buckets.add("versions", sid, [version, key])
        shards = shard_count(count)
        written = 0
        for k in range(shards):
            states = buckets.states(range(k, BUCKETS, shards))
            written += len(states)
            (folder / f"{k}.html").write_bytes(_shard_bytes(k, shards, states))
        (folder / SEARCH_PAGE).write_bytes(_encode(render_search(shards, written)))
    if stamp is not None:
        (folder / STAMP).write_bytes(json.dumps({"stamp": stamp, "states": written}).encode())
    return written


def _encode(page: str) -> bytes:
    return page.encode("utf-8", "backslashreplace")


STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin: 0 0 .4em; }
section.state { border: 1px solid #ddd; border-radius: 6px; padding: .6em .9em; margin: .8em 0; }
section.state:target { border-color: #5e35b1; box-shadow: 0 0 0 2px #d1c4e9; }
pre { white-space: pre-wrap; max-height: 30em; overflow: auto; background: #f6f6f6; }
svg .tick, svg .axis { font-size: 10px; fill: #555; } svg .tick { text-anchor: middle; }
table { border-collapse: collapse; } td, th { padding: .1em .5em; text-align: right; }
#missing { color: #8a4b00; }
"""

# The FNV-1a hash of the id typed in, as fnv1a computes it: its shard, at its anchor.
SCRIPT = """
const SHARDS = %d;
function shard(id) {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(id)) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h %% SHARDS;
}
document.getElementById("find").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = document.getElementById("q").value.trim();
  if (id) location.href = "%s" + shard(id) + ".html#" + encodeURIComponent(id);
});
function check() {
  const id = decodeURIComponent(location.hash.slice(1));
  const missing = document.getElementById("missing");
  if (missing) missing.textContent = id && !document.getElementById(id)
    ? "no state " + id + " in this report" : "";
}
window.addEventListener("hashchange", check);
check();
"""


def _form(shards: int, prefix: str) -> str:
    return (
        '<form id="find"><input id="q" size="40" placeholder="state id" autofocus> '
        '<button>open its page</button></form><p id="missing"></p>'
        f"<script>{SCRIPT % (shards, prefix)}</script>"
    )


def _head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
    ]


def _page(title: str, body: list[str]) -> str:
    return "\n".join([*_head(title), *body, "</body></html>"]) + "\n"


def render_search(shards: int, states: int) -> str:
    """The search page: an id in, its state's page out."""
    return _page(
        "statepool report: states",
        [
            '<p><a href="../index.html">← the pool</a></p>',
            f"<h1>States</h1><p>{plural(states, 'state')}: type a state id to open its page "
            "(its source, prompt, feedback history and the versions of its row).</p>",
            _form(shards, ""),
        ],
    )


def _source(source: dict[str, Any] | None) -> str:
    if source is None:
        return "not in the store now (feedback or a pool version names it)"
    if "run" in source:
        return f"run <b>{escape(source['run'])}</b>, checkpoint {source['checkpoint']}"
    step = source.get("policy_step")
    return (
        f"session <b>{escape(source['session'])}</b>, writer "
        f"{escape(str(source.get('writer')))}, policy step {'-' if step is None else step}"
    )


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _history(sid: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>no feedback recorded for it yet</p>"
    chart = svg.history_chart(rows, "history", f"{sid}: mean reward by policy step", state=sid)
    lines = [
        "<tr><th>steps</th><th>draws</th><th>answers</th><th>mean</th><th>variance</th>"
        "<th>ops match</th><th>weight (std)</th><th>weight (pass rate)</th></tr>"
    ]
    for r in rows:
        first, last = r["step_first"], r["step_last"]
        steps = "no step" if first is None else str(first) if first == last else f"{first}–{last}"
        lines.append(
            f"<tr><td>{steps}</td><td>{r['draws']}</td><td>{r['answers']}</td>"
            f"<td>{_f(r['score_mean'])}</td><td>{_f(r['score_var'])}</td>"
            f"<td>{_f(r['ops_match_rate'])}</td><td>{_f(r['weight_std'])}</td>"
            f"<td>{_f(r['weight_pass_rate'])}</td></tr>"
        )
    return (
        f"<figure>{chart}<figcaption>mean reward by policy step</figcaption></figure>"
        f"<details><summary>history by step</summary><table>{''.join(lines)}</table></details>"
    )


def _versions_list(versions: list[list[str]]) -> str:
    if not versions:
        return "<p>no pool version names it (no trainer checkpoint saved one since it came)</p>"
    items = "".join(
        f"<li>from pool version <code>{escape(v)}</code>: row key <code>{escape(k)}</code></li>"
        for v, k in versions
    )
    return f'<ul class="versions">{items}</ul>'


def render_shard(k: int, shards: int, states: dict[str, dict[str, Any]]) -> str:
    """One shard's page: a section per state, by state id."""
    return "".join(p.decode() if isinstance(p, bytes) else p for p in _shard(k, shards, states))


def _shard_bytes(k: int, shards: int, states: dict[str, dict[str, Any]]) -> bytes:
    """:func:`render_shard`'s page, encoded (an escaped prompt is put in as it is)."""
    return b"".join(p if isinstance(p, bytes) else _encode(p) for p in _shard(k, shards, states))


def _prompt_html(source: dict[str, Any] | None) -> str | tuple[str | bytes, ...]:
    """The prompt's part of a state's section: its pieces, joined as they are."""
    prompt = None if source is None else source.get("prompt")
    if prompt is None:
        return "<p>no prompt in the store</p>"
    if isinstance(prompt, _Escaped):
        chars = source.get("prompt_chars")
        shown, text = min(chars, PROMPT_SHOWN), prompt
    else:
        chars, shown, text = source.get("prompt_chars", len(prompt)), len(prompt), escape(prompt)
    cut = "" if chars <= shown else f"; the first {shown:,} shown, the whole one is in the store"
    summary = f"<details><summary>prompt ({plural(chars, 'character')}{cut})</summary><pre>"
    return (summary, text, "</pre></details>")


def _shard(k: int, shards: int, states: dict[str, dict[str, Any]]) -> list[str | bytes]:
    """One shard's page as pieces: text, and each prompt as its escaped bytes or text."""
    body: list[str | tuple[str | bytes, ...]] = [
        '<p><a href="../index.html">← the pool</a></p>',
        _form(shards, ""),
    ]
    for sid in sorted(states):
        state = states[sid]
        source = state.get("source")
        body += [
            f'<section class="state" id="{escape(sid)}">',
            f"<h2>{escape(sid)}</h2><p>{_source(source)}</p>",
            _history(sid, state["history"]),
            _prompt_html(source),
            "<h3>versions of its row</h3>",
            _versions_list(state["versions"]),
            "</section>",
        ]
    pieces: list[str | bytes] = []
    for item in [*_head(f"statepool report: states, shard {k}"), *body, "</body></html>"]:
        pieces.extend(item if isinstance(item, tuple) else (item,))
        pieces.append("\n")
    return pieces


def states_section(states: int) -> str:
    """The overview's link to the state pages."""
    return (
        f'<h2 id="states">States</h2><p><a href="{STATES_FOLDER}/{SEARCH_PAGE}">'
        f"Find a state's page by its id</a> ({plural(states, 'state')}: source, prompt, "
        "feedback history, versions of its row).</p>"
    )
