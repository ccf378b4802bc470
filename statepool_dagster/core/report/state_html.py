"""The HTML of the state pages: a shard's page of state sections, the search page, and a
shard page read back into its sections (:mod:`.state_pages` gathers what they show)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from html import escape, unescape
from typing import Any

from ..words import plural
from . import svg
from .paths import SEARCH_PAGE, STATES_FOLDER

PROMPT_SHOWN = 100_000  # characters of a prompt a page shows (the store holds it whole)


class EscapedPrompt(bytes):
    """A prompt already escaped for HTML and encoded as the page is (its first
    :data:`PROMPT_SHOWN` characters at most)."""


def encode_page(page: str) -> bytes:
    """A report page's bytes: a folder name that is not UTF-8 (``os.fsdecode`` keeps its bytes
    as ``\\udcff``) shows escaped."""
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


def shard_bytes(k: int, shards: int, states: dict[str, dict[str, Any]]) -> bytes:
    """:func:`render_shard`'s page, encoded (an escaped prompt is put in as it is)."""
    return b"".join(encoded(_shard(k, shards, states)))


def encoded(pieces: Iterable[str | bytes]) -> Iterator[bytes]:
    return (p if isinstance(p, bytes) else encode_page(p) for p in pieces)


def _prompt_html(source: dict[str, Any] | None) -> str | tuple[str | bytes, ...]:
    """The prompt's part of a state's section: its pieces, joined as they are."""
    prompt = None if source is None else source.get("prompt")
    if prompt is None:
        return "<p>no prompt in the store</p>"
    if isinstance(prompt, EscapedPrompt):
        chars = source.get("prompt_chars")
        shown, text = min(chars, PROMPT_SHOWN), prompt
    else:
        chars, shown, text = source.get("prompt_chars", len(prompt)), len(prompt), escape(prompt)
    cut = "" if chars <= shown else f"; the first {shown:,} shown, the whole one is in the store"
    summary = f"<details><summary>prompt ({plural(chars, 'character')}{cut})</summary><pre>"
    return (summary, text, "</pre></details>")


def _shard(k: int, shards: int, states: dict[str, dict[str, Any]]) -> list[str | bytes]:
    """One shard's page as pieces: text, and each prompt as its escaped bytes or text."""
    return shard_pieces(k, shards, (section_pieces(sid, states[sid]) for sid in sorted(states)))


def section_pieces(sid: str, state: dict[str, Any]) -> list[str | bytes]:
    """One state's section of its shard, as pieces (each line ended)."""
    source = state.get("source")
    items = [
        f'<section class="state" id="{escape(sid)}">',
        f"<h2>{escape(sid)}</h2><p>{_source(source)}</p>",
        _history(sid, state["history"]),
        _prompt_html(source),
        "<h3>versions of its row</h3>",
        _versions_list(state["versions"]),
        "</section>",
    ]
    return _lines(items)


def shard_pieces(
    k: int, shards: int, sections: Iterable[list[str | bytes] | bytes]
) -> list[str | bytes]:
    """A shard's page around its ``sections`` (in state id order): pieces, or a section's
    bytes as an earlier page holds them."""
    head = [
        *_head(f"statepool report: states, shard {k}"),
        '<p><a href="../index.html">← the pool</a></p>',
        _form(shards, ""),
    ]
    pieces = _lines(head)
    for section in sections:
        if isinstance(section, bytes):
            pieces.append(section)
        else:
            pieces.extend(section)
    return [*pieces, *_lines([PAGE_END])]


def _lines(items: list[str | tuple[str | bytes, ...]]) -> list[str | bytes]:
    pieces: list[str | bytes] = []
    for item in items:
        pieces.extend(item if isinstance(item, tuple) else (item,))
        pieces.append("\n")
    return pieces


PAGE_END = "</body></html>"
_SECTION = b'<section class="state" id="'


def shard_sections(page: bytes) -> dict[str, bytes] | None:
    """The sections of a shard page :func:`shard_pieces` wrote, by state id, as its bytes
    (``None``: not such a page, or an id its bytes do not give back).

    A state's section is the only place its opening tag can be: every text in a page is
    escaped, so none holds a ``<``.
    """
    end = encode_page(PAGE_END + "\n")
    if not page.endswith(end):
        return None
    starts = []
    at = page.find(_SECTION)
    while at >= 0:
        starts.append(at)
        at = page.find(_SECTION, at + 1)
    sections = {}
    for i, at in enumerate(starts):
        close = page.find(b'">', at)
        raw = page[at + len(_SECTION) : close]
        try:
            sid = unescape(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        # A character the page could not encode is written as a backslash escape, which
        # reads back as other text: such an id is not given back (nor is any backslash).
        if b"\\" in raw or encode_page(escape(sid)) != raw:
            return None
        stop = starts[i + 1] if i + 1 < len(starts) else len(page) - len(end)
        sections[sid] = page[at:stop]
    return sections


def states_section(states: int) -> str:
    """The overview's link to the state pages."""
    return (
        f'<h2 id="states">States</h2><p><a href="{STATES_FOLDER}/{SEARCH_PAGE}">'
        f"Find a state's page by its id</a> ({plural(states, 'state')}: source, prompt, "
        "feedback history, versions of its row).</p>"
    )
