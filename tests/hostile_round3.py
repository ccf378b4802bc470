"""Hostile-input round 3: mutated run folders, the original script against ``statepool sync``.

Not collected by pytest (no ``test_`` prefix): run it by hand, under ``nice``::

    nice -n 19 .venv/bin/python tests/hostile_round3.py /tmp/h3 [--only NAME_PART ...]

It builds one run folder per mutation (from ``generate_run``), runs the original script
(``../shared/reference/statepool_seed.py`` or ``$STATEPOOL_SEED``) once per run, as a
script in a subprocess with a timeout, then one ``statepool sync --json`` over them all,
and checks issue 14's rule for each run:

- no hang, no non-zero exit, no failed run, no traceback;
- where the original succeeds and we reject nothing, the same state files, byte for byte;
- a state both write that differs is explained by a reject of that run;
- where the original crashes, we reject (or ignore) something in that run.

Findings that are documented choices (README, "Hostile input") are printed as ``NOTE``;
the rest as ``FLAG``. The exit code is the number of FLAG lines (capped at 100).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec, generate_run

REPO = Path(__file__).resolve().parents[1]
SEED = Path(os.environ.get("STATEPOOL_SEED", REPO.parent / "shared/reference/statepool_seed.py"))
STATEPOOL = Path(sys.executable).with_name("statepool")
SMALL = SampleSpec(n_checkpoints=3, n_cards=2, emb_dim=3, episodes_per_batch=2)
# Snapshots past the reader's 512 KB fast-path threshold (embedding arrays blanked first).
BIG = SampleSpec(n_checkpoints=3, n_cards=4, emb_dim=40000, episodes_per_batch=2)

Mutation = Callable[[Path], None]
MUTATIONS: dict[str, tuple[SampleSpec, Mutation]] = {}
# Applied after a first `statepool sync` of the mutated run; the second sync is compared.
SECOND: dict[str, Mutation] = {}
# Runs whose states differ from the original's by design (sidecars): only checked for
# failures, hangs and tracebacks.
NO_COMPARE: set[str] = set()
# Divergences the README's "Hostile input" table lists (the run name: the row).
DOCUMENTED = {
    "ep_lf_cr_mix": "blank lines are skipped (the original crashes on them)",
    "ep_whitespace_only": "blank lines are skipped (the original crashes on them)",
    "ep_blank_lines_between": "blank lines are skipped (the original crashes on them)",
    "g_blank_then_grown": "blank lines are skipped (the original crashes on them)",
}


def mutation(name: str, spec: SampleSpec = SMALL):
    def register(fn: Mutation) -> Mutation:
        MUTATIONS[name] = (spec, fn)
        return fn

    return register


# --- helpers --------------------------------------------------------------------------------


def _eps(run: Path) -> Path:
    return run / "episodes.jsonl"


def _snap(run: Path, k: int = 1) -> Path:
    return run / "snapshots" / f"skills_v{k}.json"


def _lines(run: Path) -> list[bytes]:
    return _eps(run).read_bytes().splitlines(keepends=True)


def _set_lines(run: Path, lines: list[bytes]) -> None:
    _eps(run).write_bytes(b"".join(lines))


def _splice_episode(run: Path, index: int, field: str, raw: bytes) -> None:
    """Line ``index`` (0-based) with ``field``'s value replaced by raw JSON bytes."""
    lines = _lines(run)
    record = json.loads(lines[index])
    record[field] = "@@MARK@@"
    text = json.dumps(record, ensure_ascii=False).encode()
    lines[index] = text.replace(b'"@@MARK@@"', raw) + b"\n"
    _set_lines(run, lines)


def _raw_episode_line(run: Path, index: int, raw: bytes) -> None:
    """Insert a whole raw line (no line end added) before line ``index`` (0-based)."""
    lines = _lines(run)
    lines.insert(index, raw)
    _set_lines(run, lines)


def _splice_snapshot(run: Path, k: int, edit: Callable[[dict], None], raws: dict[str, bytes]):
    """Snapshot ``k`` re-written with ``edit`` applied, then string markers replaced by raw."""
    lib = json.loads(_snap(run, k).read_bytes())
    edit(lib)
    text = json.dumps(lib, ensure_ascii=False).encode()
    for marker, raw in raws.items():
        text = text.replace(json.dumps(marker).encode(), raw)
    _snap(run, k).write_bytes(text)


def _card_field(k: int, field: str, raw: bytes, card: int = 0) -> Mutation:
    def apply(run: Path) -> None:
        def edit(lib):
            lib["cards"][card][field] = "@@MARK@@"

        _splice_snapshot(run, k, edit, {"@@MARK@@": raw})

    return apply


def _top_field(k: int, field: str, raw: bytes) -> Mutation:
    def apply(run: Path) -> None:
        def edit(lib):
            lib[field] = "@@MARK@@"

        _splice_snapshot(run, k, edit, {"@@MARK@@": raw})

    return apply


def _snap_bytes(k: int, transform: Callable[[bytes], bytes]) -> Mutation:
    def apply(run: Path) -> None:
        _snap(run, k).write_bytes(transform(_snap(run, k).read_bytes()))

    return apply


def _eps_bytes(transform: Callable[[bytes], bytes]) -> Mutation:
    def apply(run: Path) -> None:
        _eps(run).write_bytes(transform(_eps(run).read_bytes()))

    return apply


# --- episodes.jsonl ------------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"
mutation("ep_bom")(_eps_bytes(lambda b: BOM + b))
mutation("ep_bom_line3")(
    lambda r: _set_lines(r, [*_lines(r)[:2], BOM + _lines(r)[2], *_lines(r)[3:]])
)
mutation("ep_crlf")(_eps_bytes(lambda b: b.replace(b"\n", b"\r\n")))
mutation("ep_cr_only")(_eps_bytes(lambda b: b.replace(b"\n", b"\r")))
mutation("ep_lf_cr_mix")(_eps_bytes(lambda b: b.replace(b"\n", b"\n\r", 2)))
mutation("ep_no_final_newline")(_eps_bytes(lambda b: b.rstrip(b"\n")))
mutation("ep_empty")(_eps_bytes(lambda b: b""))
mutation("ep_whitespace_only")(_eps_bytes(lambda b: b"\n \n\t\n"))
mutation("ep_blank_lines_between")(_eps_bytes(lambda b: b.replace(b"\n", b"\n\n")))
mutation("ep_ws_line_ff")(lambda r: _raw_episode_line(r, 1, b"\x0c\n"))
mutation("ep_ws_line_nbsp")(lambda r: _raw_episode_line(r, 1, b"\xc2\xa0\n"))
mutation("ep_nul_line")(lambda r: _raw_episode_line(r, 1, b"\x00\n"))
mutation("ep_nul_end_of_line")(
    lambda r: _set_lines(r, [_lines(r)[0].rstrip(b"\n") + b"\x00\n", *_lines(r)[1:]])
)
mutation("ep_nul_in_string")(lambda r: _splice_episode(r, 1, "question", b'"a\x00b"'))
mutation("ep_nul_escaped")(lambda r: _splice_episode(r, 1, "question", b'"a\\u0000b"'))
mutation("ep_ctrl_in_string")(lambda r: _splice_episode(r, 1, "question", b'"a\x1fb\x7f"'))
mutation("ep_tab_in_string")(lambda r: _splice_episode(r, 1, "question", b'"a\tb"'))
mutation("ep_invalid_utf8")(lambda r: _splice_episode(r, 1, "question", b'"caf\xe9"'))
mutation("ep_invalid_utf8_ff")(lambda r: _splice_episode(r, 1, "question", b'"\xff\xfe"'))
mutation("ep_overlong_utf8")(lambda r: _splice_episode(r, 1, "question", b'"\xc0\xaf"'))
mutation("ep_surrogate_utf8")(lambda r: _splice_episode(r, 1, "question", b'"\xed\xa0\x80"'))
mutation("ep_above_unicode")(lambda r: _splice_episode(r, 1, "question", b'"\xf4\x90\x80\x80"'))
mutation("ep_invalid_utf8_key")(lambda r: _splice_episode(r, 1, "question", b'1, "k\xff": 2'))
mutation("ep_invalid_utf8_outside")(lambda r: _splice_episode(r, 1, "question", b"1 \xff"))
mutation("ep_truncated_utf8_eof")(_eps_bytes(lambda b: b + '{"question": "é'.encode()[:-1]))
mutation("ep_u2028_u0085_raw")(
    lambda r: _splice_episode(r, 1, "question", '"a\u2028b\u2029c\x85d\x1ce\x1df\x1eg"'.encode())
)
mutation("ep_u0085_between_tokens")(lambda r: _splice_episode(r, 1, "question", "\x851".encode()))
mutation("ep_unicode_escapes")(
    lambda r: _splice_episode(
        r,
        1,
        "question",
        rb'"\u0000 \ud83d\ude00 \/ \u00e9 \" \\ \b\f\n\r\t \uFFFF \uDBFF\uDFFF"',
    )
)
mutation("ep_reversed_pair")(lambda r: _splice_episode(r, 1, "question", rb'"\ude00\ud83d"'))
mutation("ep_lone_surrogate")(lambda r: _splice_episode(r, 1, "question", rb'"\ud800"'))
mutation("ep_escaped_keys")(
    lambda r: _splice_episode(
        r, 1, "question", rb'1, "\u0000": 1, "\ud83d\ude00": 2, "a\/b": 3, "": 4'
    )
)
mutation("ep_escaped_version_key")(
    lambda r: _splice_episode(r, 1, "question", rb'1, "skill_lib_versio\u006e": 2')
)
mutation("ep_long_key")(
    lambda r: _splice_episode(r, 1, "question", b'1, "' + b"k" * 300_000 + b'": 1')
)
mutation("ep_long_string")(
    lambda r: _splice_episode(r, 1, "question", b'"' + b"x" * 700_000 + b'"')
)
mutation("ep_dup_version_last_wins")(
    lambda r: _splice_episode(r, 1, "question", b'1, "skill_lib_version": 2')
)
mutation("ep_dup_version_bad_first")(
    lambda r: _set_lines(
        r,
        [
            _lines(r)[0],
            b'{"skill_lib_version": "x", "id": "d", "skill_lib_version": 1}\n',
            *_lines(r)[1:],
        ],
    )
)
mutation("ep_dup_version_bad_last")(
    lambda r: _set_lines(
        r,
        [
            _lines(r)[0],
            b'{"skill_lib_version": 1, "id": "d", "skill_lib_version": null}\n',
            *_lines(r)[1:],
        ],
    )
)
mutation("ep_dup_key_bad_utf8_first")(
    lambda r: _splice_episode(r, 1, "question", b'"\xff", "question": "ok"')
)
mutation("ep_dup_key_ctrl_first")(
    lambda r: _splice_episode(r, 1, "question", b'"\x01", "question": "ok"')
)
mutation("ep_dup_key_bigint_first")(
    lambda r: _splice_episode(r, 1, "question", b"1" * 4400 + b', "question": "ok"')
)
mutation("ep_dup_key_deep_first")(
    lambda r: _splice_episode(r, 1, "question", b"[" * 600 + b"]" * 600 + b', "question": 1')
)
mutation("ep_dup_other_key")(
    lambda r: _splice_episode(r, 1, "question", b'1, "id": "dup", "id": 3')
)
mutation("ep_dup_key_order")(
    lambda r: _set_lines(r, [b'{"b": 1, "a": 2, "b": 3, "skill_lib_version": 1}\n', *_lines(r)])
)
for _name, _raw in {
    "neg": b"-1",
    "neg0": b"-0",
    "zero_float": b"0.0",
    "neg_zero_float": b"-0.0",
    "1e0": b"1e0",
    "1E0": b"1E0",
    "1E2": b"1E2",
    "1e-0": b"1e-0",
    "10e-1": b"10e-1",
    "inf": b"1E+400",
    "zero_e1000": b"0e1000",
    "tiny": b"1e-400",
    "big_float": b"1e300",
    "int64_max": b"9223372036854775807",
    "int64_min": b"-9223372036854775808",
    "null": b"null",
    "false": b"false",
    "list": b"[1]",
    "object": b'{"a": 1}',
    "string0": b'"0"',
    "nan_lower": b"nan",
    "inf_lower": b"inf",
    "dot5": b".5",
    "5dot": b"5.",
    "plus1": b"+1",
    "hex": b"0x1",
    "underscore": b"1_0",
    "leading0": b"01",
    "0.99999999999999999": b"0.99999999999999999",
    "1.00000000000000001": b"1.00000000000000001",
}.items():
    mutation(f"ep_version_{_name}")(
        lambda r, raw=_raw: _splice_episode(r, 1, "skill_lib_version", raw)
    )
mutation("ep_version_missing")(
    lambda r: _set_lines(r, [*_lines(r)[:1], b'{"id": "no-version"}\n', *_lines(r)[1:]])
)
mutation("ep_version_neg_pairs_v0")(
    lambda r: _set_lines(r, [b'{"id": "minus", "skill_lib_version": -1}\n', *_lines(r)])
)
mutation("ep_version_no_snapshot")(
    lambda r: _set_lines(r, [*_lines(r), b'{"id": "far", "skill_lib_version": 99}\n'])
)
mutation("ep_numbers")(
    lambda r: _splice_episode(
        r,
        1,
        "question",
        b"[-0.0, 1E+400, -1e999, 0e1000, 1e-400, 5e-324, 2.2250738585072011e-308, "
        b"0.1000000000000000055511151231257827, 123456789012345678901234567890, "
        b"-0, 1.5E3, 1.7976931348623157e308, 1.7976931348623159e308, 1e22, 1e23]",
    )
)
for _name, _raw in {
    "nan_lower": b"nan",
    "inf_lower": b"inf",
    "Nan": b"Nan",
    "infinity": b"infinity",
    "plus_inf": b"+Infinity",
    "neg_nan": b"-NaN",
    "dot5": b".5",
    "5dot": b"5.",
    "1e": b"1e",
    "single_quote": b"'a'",
    "true_cap": b"True",
    "None": b"None",
    "trailing_comma": b"[1,]",
}.items():
    mutation(f"ep_token_{_name}")(lambda r, raw=_raw: _splice_episode(r, 1, "question", raw))
mutation("ep_ws_tab_inside")(_eps_bytes(lambda b: b.replace(b", ", b",\t", 5)))
mutation("ep_ws_ff_inside")(lambda r: _splice_episode(r, 1, "question", b"\x0c1"))
mutation("ep_ws_vt_inside")(lambda r: _splice_episode(r, 1, "question", b"\x0b1"))
mutation("ep_trailing_garbage")(
    lambda r: _set_lines(r, [_lines(r)[0].rstrip(b"\n") + b" x\n", *_lines(r)[1:]])
)
mutation("ep_trailing_ws")(
    lambda r: _set_lines(r, [_lines(r)[0].rstrip(b"\n") + b" \t \n", *_lines(r)[1:]])
)
mutation("ep_two_objects_one_line")(
    lambda r: _set_lines(r, [_lines(r)[0].rstrip(b"\n") + _lines(r)[1], *_lines(r)[2:]])
)
mutation("ep_truncated_mid_line")(_eps_bytes(lambda b: b[: len(b) - 40]))
mutation("ep_truncated_mid_escape")(_eps_bytes(lambda b: b + b'{"id": "a\\u00'))
mutation("ep_array_line")(lambda r: _raw_episode_line(r, 1, b"[1, 2]\n"))
mutation("ep_scalar_lines")(lambda r: _raw_episode_line(r, 1, b'3\n"x"\nnull\ntrue\n'))
mutation("ep_empty_object")(lambda r: _raw_episode_line(r, 1, b"{}\n"))
mutation("ep_many_tiny", SampleSpec(n_checkpoints=2, n_cards=1, emb_dim=2, episodes_per_batch=1))(
    _eps_bytes(lambda b: b + b'{"skill_lib_version": 1}\n' * 60_000)
)
mutation(
    "ep_many_tiny_nonl", SampleSpec(n_checkpoints=2, n_cards=1, emb_dim=2, episodes_per_batch=1)
)(_eps_bytes(lambda b: b + b"{}\n" * 30_000 + b"{}"))
mutation("ep_deep_100")(lambda r: _splice_episode(r, 1, "question", b"[" * 100 + b"]" * 100))
mutation("ep_chunk_boundary_crlf")(
    # a \r\n pair split across the reader's 256 KB chunks, and a \r right at a chunk end
    _eps_bytes(
        lambda b: (
            b"".join(
                json.dumps({"skill_lib_version": 1, "pad": "x" * n}).encode() + b"\r\n"
                for n in (262_100, 262_120, 262_130, 262_140, 50)
            )
            + b
        )
    )
)
mutation("ep_chunk_boundary_cr")(
    _eps_bytes(
        lambda b: (
            b"".join(
                json.dumps({"skill_lib_version": 1, "pad": "x" * n}).encode() + b"\r"
                for n in (262_100, 262_120, 262_130, 262_140, 50)
            )
            + b
        )
    )
)


def _cr_at_boundary(b: bytes) -> bytes:
    # Lines sized so that a line's \r is the last byte of a 256 KB chunk and its \n the first
    # byte of the next one (file iteration of a binary file yields up to \n, not by chunk,
    # but a buffered reader may still split): try several offsets.
    out = []
    for shift in range(-3, 4):
        pad = 262_144 - len(b'{"skill_lib_version": 1, "pad": ""}') - 1 + shift
        out.append(json.dumps({"skill_lib_version": 1, "pad": "y" * pad}).encode() + b"\r\n")
    return b"".join(out) + b


mutation("ep_crlf_at_256k")(_eps_bytes(_cr_at_boundary))

# --- snapshots -----------------------------------------------------------------------------


def _register_snapshot_mutations(prefix: str, spec: SampleSpec) -> None:
    m = lambda name, fn: mutation(f"{prefix}{name}", spec)(fn)  # noqa: E731
    m("bom", _snap_bytes(1, lambda b: BOM + b))
    m(
        "crlf_pretty",
        _snap_bytes(
            1, lambda b: json.dumps(json.loads(b), indent=1).replace("\n", "\r\n").encode()
        ),
    )
    m("empty", _snap_bytes(1, lambda b: b""))
    m("whitespace", _snap_bytes(1, lambda b: b" \n\t"))
    m("trailing_garbage", _snap_bytes(1, lambda b: b + b" x"))
    m("trailing_ws", _snap_bytes(1, lambda b: b + b" \r\n\t"))
    m("trailing_nul", _snap_bytes(1, lambda b: b + b"\x00"))
    m("trailing_ff", _snap_bytes(1, lambda b: b + b"\x0c"))
    m("two_objects", _snap_bytes(1, lambda b: b + b))
    m("truncated", _snap_bytes(1, lambda b: b[: len(b) // 2]))
    m("truncated_end", _snap_bytes(1, lambda b: b[:-1]))
    m("array", _snap_bytes(1, lambda b: b"[" + b + b"]"))
    m("scalar_num", _snap_bytes(1, lambda b: b"3"))
    m("scalar_null", _snap_bytes(1, lambda b: b"null"))
    m("scalar_str", _snap_bytes(1, lambda b: b'"cards"'))
    m("nul_in_trigger", _card_field(1, "trigger", b'"a\x00b"'))
    m("nul_escaped_trigger", _card_field(1, "trigger", b'"a\\u0000b"'))
    m("utf8_bad_trigger", _card_field(1, "trigger", b'"caf\xe9"'))
    m("utf8_surrogate_trigger", _card_field(1, "trigger", b'"\xed\xa0\x80"'))
    m("utf8_bad_emb_string", _card_field(1, "_trigger_emb", b'"\xff"'))
    m("utf8_bad_emb_nested", _card_field(1, "_trigger_emb", b'{"a": ["\xe9"]}'))
    m("utf8_bad_emb_array_str", _card_field(1, "_trigger_emb", b'[1, "\xc0\xaf"]'))
    m("utf8_bad_emb_key", _card_field(1, "_trigger_emb", b'{"\xff": 1}'))
    m("ctrl_emb_string", _card_field(1, "_trigger_emb", b'"\x01"'))
    m("utf8_bad_emb_dup", _card_field(1, "_trigger_emb", b'"\xff", "_trigger_emb": [1, 2]'))
    m("utf8_bad_version", _top_field(1, "version", b'"\xff"'))
    m("utf8_bad_top_key", _top_field(1, "extra", b'1, "\xfe": 2'))
    m("utf8_bad_meta", _card_field(1, "meta_info", b'{"note": "\xe9"}'))
    m("u2028_raw_trigger", _card_field(1, "trigger", '"a\u2028b\x85c"'.encode()))
    m("unicode_escapes_trigger", _card_field(1, "trigger", rb'"\u0000\ud83d\ude00\/\u00e9\"\\"'))
    m("lone_surrogate_emb", _card_field(1, "_trigger_emb", rb'"\ud800"'))
    m("escaped_keys", _card_field(1, "program", rb'"p", "\u0000": 1, "a\/b": 2, "": 3'))
    m("long_key", _card_field(1, "program", b'"p", "' + b"k" * 300_000 + b'": 1'))
    for name, raw in {
        "string": b'"abc"',
        "object": b'{"a": [1, 2]}',
        "null": b"null",
        "number": b"1.5",
        "nested_lists": b"[[1, 2], [3]]",
        "empty_list": b"[]",
        "true": b"true",
        "nan_list": b"[NaN, -Infinity, Infinity]",
        "nan_bare": b"NaN",
        "list_of_str": b'["a", "]", "["]',
        "list_ws": b"[ 1 ,\t2 ,\r\n3 ]",
        "list_ff": b"[1,\x0c2]",
        "list_nbsp": b"[1,\xc2\xa02]",
        "list_big_exp": b"[1E+400, 0e1000, -0.0, 1e-400]",
        "list_nan_lower": b"[nan]",
        "list_dot5": b"[.5]",
        "list_5dot": b"[5.]",
        "list_plus": b"[+1]",
        "list_trailing_comma": b"[1,]",
        "list_unclosed_in_str": b'[1], "x": "]"',
    }.items():
        m(f"emb_{name}", _card_field(1, "_trigger_emb", raw))
    m("dup_trigger_bad_utf8_first", _card_field(1, "trigger", b'"\xff", "trigger": "t"'))
    m("dup_trigger_ctrl_first", _card_field(1, "trigger", b'"\x01", "trigger": "t"'))
    m("dup_trigger_bigint_first", _card_field(1, "trigger", b"1" * 4400 + b', "trigger": "t"'))
    m("dup_trigger_surrogate_first", _card_field(1, "trigger", rb'"\ud800", "trigger": "t"'))
    m("dup_meta_nan_first", _card_field(1, "meta_info", b'NaN, "meta_info": {}'))
    m("dup_top_bad_utf8_first", _top_field(1, "version", b'"\xfe", "version": 1'))
    m("dup_cards_bad_utf8_first", _snap_bytes(1, lambda b: b'{"cards": ["\xff"],' + b[1:]))
    m("dup_cards_surrogate_first", _snap_bytes(1, lambda b: b'{"cards": ["\\ud800"],' + b[1:]))
    m("emb_dup", _card_field(1, "_trigger_emb", b'[1], "_trigger_emb": [2]'))
    m("emb_dup_bad_first", _card_field(1, "_trigger_emb", b'[1,,2], "_trigger_emb": [2]'))
    m("emb_dup_bad_last", _card_field(1, "_trigger_emb", b'[2], "_trigger_emb": [1,,2]'))
    m("emb_in_meta", _card_field(1, "meta_info", b'{"_trigger_emb": [1, 2]}'))
    m("emb_top_level", _top_field(1, "_trigger_emb", b"[1, 2]"))
    m("emb_in_string_value", _card_field(1, "trigger", b'"\\"_trigger_emb\\": [1]"'))

    def cards(raw: bytes) -> Mutation:
        return _top_field(1, "cards", raw)

    for name, raw in {
        "missing": None,
        "null": b"null",
        "str_item": b'["a"]',
        "num_item": b"[1]",
        "null_item": b"[null]",
        "list_item": b"[[]]",
        "mixed": b'[{"card_id": "x"}, 3]',
        "dict_nonempty": b'{"a": {"card_id": "x"}}',
        "dict_empty": b"{}",
        "str_empty": b'""',
        "str_nonempty": b'"ab"',
        "true": b"true",
        "false": b"false",
        "zero": b"0",
        "empty_list": b"[]",
        "empty_card": b"[{}]",
    }.items():
        if raw is None:

            def drop(run: Path) -> None:
                _splice_snapshot(run, 1, lambda lib: lib.pop("cards"), {})

            m("cards_missing", drop)
        else:
            m(f"cards_{name}", cards(raw))
    m(
        "cards_dup",
        _snap_bytes(1, lambda b: b[:-1] + b', "cards": [{"card_id": "second"}]}'),
    )
    m("cards_dup_bad_first", _snap_bytes(1, lambda b: b'{"cards": 3,' + b[1:]))
    m("cards_dup_bad_last", _snap_bytes(1, lambda b: b[:-1] + b', "cards": 3}'))
    m("version_dup", _snap_bytes(1, lambda b: b'{"version": 7,' + b[1:]))
    m("version_missing", lambda r: _splice_snapshot(r, 1, lambda lib: lib.pop("version"), {}))
    for name, raw in {
        "neg": b"-1",
        "float": b"1.0",
        "neg0": b"-0",
        "1E2": b"1E2",
        "nan": b"NaN",
        "huge": b"1" * 40,
        "null": b"null",
        "str": b'"1"',
    }.items():
        m(f"version_{name}", _top_field(1, "version", raw))
    for name, raw in {
        "nan_lower": b"nan",
        "inf_lower": b"inf",
        "dot5": b".5",
        "5dot": b"5.",
        "numbers": b"[-0.0, 1E+400, 0e1000, 1e-400, 5e-324, 123456789012345678901234567890]",
        "ff_ws": b"\x0c1",
        "vt_ws": b"\x0b1",
        "tab_ws": b"\t1\t",
    }.items():
        m(f"token_{name}", _card_field(1, "meta_info", raw))
    m(
        "ws_tabs_everywhere",
        _snap_bytes(1, lambda b: b.replace(b": ", b":\t").replace(b", ", b",\t")),
    )
    m("ws_cr_everywhere", _snap_bytes(1, lambda b: b.replace(b": ", b":\r").replace(b", ", b",\r")))
    m("ws_ff_everywhere", _snap_bytes(1, lambda b: b.replace(b": ", b":\x0c")))


_register_snapshot_mutations("sn_", SMALL)
_register_snapshot_mutations("big_", BIG)


@mutation("sn_v0_only_neg_episodes")
def _v0_neg(run: Path) -> None:
    lines = [ln for ln in _lines(run) if b'"skill_lib_version": 0' in ln]
    lines = [ln.replace(b'"skill_lib_version": 0', b'"skill_lib_version": -1') for ln in lines]
    _set_lines(run, [*_lines(run), *lines])


@mutation("sn_no_episodes_for_some")
def _no_eps(run: Path) -> None:
    _set_lines(run, [ln for ln in _lines(run) if b'"skill_lib_version": 1' not in ln])


@mutation("sn_broken_unpaired")
def _broken_unpaired(run: Path) -> None:
    # skills_v2 pairs with batch 1 or 2: with neither, the original never opens it
    _set_lines(
        run,
        [
            ln
            for ln in _lines(run)
            if b'"skill_lib_version": 2' not in ln and b'"skill_lib_version": 1' not in ln
        ],
    )
    _snap(run, 2).write_bytes(b"{broken")


@mutation("sn_v00_and_v0")
def _v00(run: Path) -> None:
    shutil.copy(_snap(run, 0), run / "snapshots" / "skills_v00.json")


@mutation("sn_no_snapshots_dir")
def _no_snaps(run: Path) -> None:
    shutil.rmtree(run / "snapshots")


@mutation("sn_empty_snapshots_dir")
def _empty_snaps(run: Path) -> None:
    for p in (run / "snapshots").iterdir():
        p.unlink()


@mutation("sn_big_version_name")
def _big_version_name(run: Path) -> None:
    shutil.copy(_snap(run, 1), run / "snapshots" / "skills_v00000000000000000000001.json")


# --- every field of an episode and a card holding every kind of value ---------------------

VALUES = {
    "str": b'"x"',
    "empty_str": b'""',
    "int": b"7",
    "neg": b"-3",
    "float": b"2.5",
    "nan": b"NaN",
    "inf": b"-Infinity",
    "true": b"true",
    "null": b"null",
    "list": b'[1, "a", null]',
    "object": b'{"a": [1]}',
    "empty_list": b"[]",
    "empty_object": b"{}",
    "huge_int": b"9" * 400,
    "neg_zero": b"-0.0",
    "nul_str": b'"\\u0000"',
}
EPISODE_FIELDS = ["id", "task", "video", "realtime", "question", "options", "gt", "response"]
EPISODE_FIELDS += ["correct", "fired_cards"]


def _fields_on_lines(raw: bytes) -> Mutation:
    def apply(run: Path) -> None:
        lines = _lines(run)
        for i, field in enumerate(EPISODE_FIELDS):
            record = json.loads(lines[i % len(lines)])
            record[field] = "@@MARK@@"
            text = json.dumps(record, ensure_ascii=False).encode()
            lines.append(text.replace(b'"@@MARK@@"', raw) + b"\n")
        _set_lines(run, lines)

    return apply


def _card_fields(raw: bytes) -> Mutation:
    def apply(run: Path) -> None:
        edits = {
            0: [("card_id", 0), ("version", None)],
            1: [("trigger", 0), ("meta_info", 1)],
            2: [("program", 0), ("injected", 1)],
        }
        for k, fields in edits.items():

            def edit(lib, fields=fields):
                for field, card in fields:
                    card = None if card is None else min(card, len(lib["cards"]) - 1)
                    if card is None:
                        lib[field] = "@@MARK@@"
                    elif field == "injected":
                        lib["cards"][card].setdefault("meta_info", {})[field] = "@@MARK@@"
                    else:
                        lib["cards"][card][field] = "@@MARK@@"

            _splice_snapshot(run, k, edit, {"@@MARK@@": raw})

    return apply


for _name, _raw in VALUES.items():
    mutation(f"fv_episode_{_name}", SampleSpec(3, 2, 3, 4))(_fields_on_lines(_raw))
    mutation(f"fv_card_{_name}")(_card_fields(_raw))
mutation("fv_episode_keys_like_columns")(
    lambda r: _splice_episode(
        r,
        1,
        "question",
        b'"q", "line": "x", "record": 5, "version": "a", "run": null, "state": [],'
        b' "state_id": 1, "batch": {}, "episodes": 3, "skill_lib_version_": 1',
    )
)


@mutation("sn_int64_max_name")
def _int64_max(run: Path) -> None:
    shutil.copy(_snap(run, 1), run / "snapshots" / "skills_v9223372036854775807.json")
    _set_lines(
        run,
        [*_lines(run), b'{"id": "top", "skill_lib_version": 9223372036854775806}\n'],
    )


@mutation("ep_version_int64_extremes")
def _int64_ext(run: Path) -> None:
    _set_lines(
        run,
        [
            *_lines(run),
            b'{"id": "min", "skill_lib_version": -9223372036854775808}\n',
            b'{"id": "max", "skill_lib_version": 9223372036854775807}\n',
            b'{"id": "max-float", "skill_lib_version": 9.223372036854775807e18}\n',
            b'{"id": "min-float", "skill_lib_version": -9.223372036854775808e18}\n',
        ],
    )


mutation("ep_u2028_valid")(
    lambda r: _splice_episode(r, 1, "question", '"a\u2028b\u2029c\x85d\x7fe\ufeff"'.encode())
)


@mutation("scale_many_snapshots", SampleSpec(n_checkpoints=1, n_cards=1, emb_dim=2))
def _many_snapshots(run: Path) -> None:
    lines = []
    for k in range(1, 1500):
        body = {"version": k, "cards": [{"card_id": f"c{k}", "_trigger_emb": [0.5, k]}]}
        _snap(run, k).write_bytes(json.dumps(body).encode())
        lines.append(json.dumps({"id": f"e{k}", "skill_lib_version": k}).encode() + b"\n")
    _set_lines(run, [*_lines(run), *lines])


mutation("scale_cr_only_big", SampleSpec(n_checkpoints=2, n_cards=1, emb_dim=2))(
    _eps_bytes(
        lambda b: b.replace(b"\n", b"\r") + b'{"skill_lib_version": 1, "p": "xx"}\r' * 400_000
    )
)

# --- random splices: interesting tokens at random places (reproducible: seeded by name) ------

TOKENS = [
    b'"',
    b"\\",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b":",
    b"\xff",
    b"\xc3",
    b"\x00",
    b"\r",
    b"\n",
    b"\r\n",
    b" ",
    b"\t",
    b"\x0c",
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"-0",
    b"9" * 4301,
    b'"_trigger_emb": ',
    b'"_trigger_emb": [1], ',
    b'"cards": ',
    b'"cards": [], ',
    b'"skill_lib_version": ',
    b'"skill_lib_version": 2, ',
    b'"version": 1, ',
    b"\\u0000",
    b"\\ud800",
    b"\\ud83d\\ude00",
    b"\\u005f",
    b"\xef\xbb\xbf",
    b"\xe2\x80\xa8",
    b"null",
    b"true",
    b"[[[[",
    b"]]]]",
    b'"a": 1, "a": 2, ',
]


def _random_splices(seed: int, target: str) -> Mutation:
    def apply(run: Path) -> None:
        import random

        rng = random.Random(seed)
        path = _eps(run) if target == "eps" else _snap(run, rng.choice([0, 1, 2]))
        data = bytearray(path.read_bytes())
        for _ in range(rng.choice([1, 1, 2, 3])):
            at = rng.randrange(len(data) + 1)
            op = rng.random()
            if op < 0.6:
                data[at:at] = rng.choice(TOKENS)
            elif op < 0.8:
                data[at : at + rng.randint(1, 8)] = b""
            else:
                # a member-sized span repeated (a duplicate key, usually)
                start = data.rfind(b", ", 0, at)
                end = data.find(b", ", at)
                if 0 <= start < end:
                    data[end:end] = data[start:end]
        path.write_bytes(bytes(data))

    return apply


# ROUND3_SEED shifts the seeds, ROUND3_RANDOM sets how many runs of each kind (60)
_SEED = int(os.environ.get("ROUND3_SEED", "0")) * 10_000
_COUNT = int(os.environ.get("ROUND3_RANDOM", "60"))
for _i in range(_COUNT):
    mutation(f"rnd_eps_{_i}")(_random_splices(_SEED + _i, "eps"))
    mutation(f"rnd_snap_{_i}")(_random_splices(_SEED + 1000 + _i, "snap"))
for _i in range(_COUNT // 4):
    mutation(f"rnd_big_snap_{_i}", BIG)(_random_splices(_SEED + 2000 + _i, "snap"))


def _random_growth(seed: int, phase: int) -> Mutation:
    """A writer caught mid-write: the file cut anywhere, then grown by random tails."""

    def apply(run: Path) -> None:
        import random

        rng = random.Random(seed * 2 + phase)
        data = _eps(run).read_bytes()
        if phase == 0:
            lines = data.splitlines(keepends=True)
            cut = rng.randrange(len(data) + 1)
            held = data[cut:]
            (run / ".held").write_bytes(held)  # hidden: not a run file, not fingerprinted
            data = data[:cut]
            if rng.random() < 0.3:
                data += rng.choice(TOKENS)
            del lines
        else:
            held = (run / ".held").read_bytes()
            pieces = [held]
            for _ in range(rng.randint(0, 3)):
                pieces.append(rng.choice([b"\n", b"\r", b"\r\n", b"", rng.choice(TOKENS)]))
                pieces.append(b'{"id": "grown", "skill_lib_version": %d}' % rng.randint(0, 3))
            data += b"".join(pieces)
            if rng.random() < 0.7:
                data += b"\n"
        _eps(run).write_bytes(data)

    return apply


for _i in range(_COUNT // 2):
    mutation(f"rnd_grow_{_i}")(_random_growth(_SEED + 3000 + _i, 0))
    SECOND[f"rnd_grow_{_i}"] = _random_growth(_SEED + 3000 + _i, 1)

# --- sidecars (states differ by design: only failures are checked) ------------------------


def sidecar(name: str, path: str, data: bytes) -> None:
    def apply(run: Path) -> None:
        (run / path).parent.mkdir(parents=True, exist_ok=True)
        (run / path).write_bytes(data)

    mutation(f"sc_{name}")(apply)
    NO_COMPARE.add(f"sc_{name}")


sidecar("analysis_bom", "analyses/analysis_v1.json", BOM + b'{"summary": "s"}')
sidecar("analysis_bad_utf8", "analyses/analysis_v1.json", b'{"summary": "\xff"}')
sidecar("analysis_list", "analyses/analysis_v1.json", b"[1]")
sidecar("analysis_empty", "analyses/analysis_v1.json", b"")
sidecar("analysis_surrogate", "analyses/analysis_v1.json", rb'{"s": "\ud800"}')
sidecar("analysis_nan", "analyses/analysis_v1.json", b'{"s": NaN, "t": 1e999}')
sidecar("analysis_deep", "analyses/analysis_v1.json", b'{"s": ' + b"[" * 600 + b"]" * 600 + b"}")
sidecar("analysis_huge_version", "analyses/analysis_v99999999999999999999.json", b"{}")
sidecar("analysis_v0", "analyses/analysis_v0.json", b'{"summary": "zero"}')
sidecar("analysis_no_state", "analyses/analysis_v7.json", b'{"summary": "none"}')
sidecar("analysis_dup_keys", "analyses/analysis_v1.json", b'{"summary": "\xff", "summary": 1}')
sidecar("receipt_bad_utf8", "receipts/receipt_v1.txt", b"caf\xe9")
sidecar("receipt_bom_crlf", "receipts/receipt_v1.txt", BOM + b"line\r\nline\r\n")
sidecar("receipt_nul", "receipts/receipt_v1.txt", b"a\x00b\x01")
sidecar("receipt_empty", "receipts/receipt_v1.txt", b"")
sidecar("receipt_huge_version", "receipts/receipt_v99999999999999999999.txt", b"x")
sidecar("receipt_u2028", "receipts/receipt_v1.txt", "a\u2028b\x85c\ud7ff".encode())
sidecar("receipt_big", "receipts/receipt_v1.txt", b"r" * 3_000_000)

# --- two syncs: the files change between them (a writer mid-write, an edit) ---------------


def twice(name: str, first: Mutation, second: Mutation, spec: SampleSpec = SMALL) -> None:
    mutation(f"g_{name}", spec)(first)
    SECOND[f"g_{name}"] = second


_LAST = b'{"id": "late", "question": "caf\xc3\xa9 \xe2\x80\xa8", "skill_lib_version": 1}\n'
twice(
    "partial_line_completed",
    _eps_bytes(lambda b: b + _LAST[:20]),
    _eps_bytes(lambda b: b + _LAST[20:]),
)
twice(
    "partial_utf8_completed",
    _eps_bytes(lambda b: b + _LAST[:37]),
    _eps_bytes(lambda b: b + _LAST[37:]),
)
twice(
    "cr_then_lf",
    _eps_bytes(lambda b: b + _LAST[:-1] + b"\r"),
    _eps_bytes(lambda b: b + b"\n" + _LAST),
)
twice("cr_then_line", _eps_bytes(lambda b: b + _LAST[:-1] + b"\r"), _eps_bytes(lambda b: b + _LAST))
twice(
    "all_cr_grown",
    _eps_bytes(lambda b: b.replace(b"\n", b"\r")),
    _eps_bytes(lambda b: b + _LAST.replace(b"\n", b"\r")),
)
twice("blank_then_grown", _eps_bytes(lambda b: b + b"\n  \n"), _eps_bytes(lambda b: b + _LAST))
twice("bad_then_grown", _eps_bytes(lambda b: b + b"{bad\n"), _eps_bytes(lambda b: b + _LAST))
twice(
    "shrunk", _eps_bytes(lambda b: b + _LAST), _eps_bytes(lambda b: b[: len(b) - len(_LAST) - 50])
)
twice("emptied", lambda r: None, _eps_bytes(lambda b: b""))
twice(
    "same_size_edit",
    lambda r: None,
    _eps_bytes(lambda b: b.replace(b'"skill_lib_version": 1', b'"skill_lib_version": 2', 1)),
)
twice(
    "line_fixed",
    _eps_bytes(lambda b: b.replace(b"}\n", b"\n", 1)),
    _eps_bytes(lambda b: b.replace(b"\n", b"}\n", 1)),
)
twice("line_broken", lambda r: None, _eps_bytes(lambda b: b.replace(b"}\n", b"\n", 1)))
twice("prefix_edit", lambda r: None, _eps_bytes(lambda b: b"{}\n" + b[3:]))
twice("episodes_deleted", lambda r: None, lambda r: _eps(r).unlink())
twice("snapshot_deleted", lambda r: None, lambda r: _snap(r, 1).unlink())
twice("snapshot_broken", lambda r: None, _snap_bytes(1, lambda b: b[:-1]))
twice("snapshot_bad_utf8_emb", lambda r: None, _card_field(1, "_trigger_emb", b'"\xff"'))
twice("snapshot_fixed", _snap_bytes(1, lambda b: b[:-1]), _snap_bytes(1, lambda b: b + b"}"))
twice(
    "snapshot_renamed",
    lambda r: None,
    lambda r: _snap(r, 1).rename(r / "snapshots" / "skills_v01.json"),
)
twice("snapshots_dir_deleted", lambda r: None, lambda r: shutil.rmtree(r / "snapshots"))
twice(
    "snapshot_added_dup",
    lambda r: None,
    lambda r: shutil.copy(_snap(r, 2), r / "snapshots" / "skills_v002.json"),
)
twice(
    "version_moved",
    lambda r: None,
    _eps_bytes(lambda b: b.replace(b'"skill_lib_version": 2', b'"skill_lib_version": 9')),
)
twice(
    "big_line_grown",
    _eps_bytes(lambda b: b + b'{"skill_lib_version": 1, "pad": "' + b"p" * 600_000),
    _eps_bytes(lambda b: b + b'"}\n'),
)

# --- running both sides --------------------------------------------------------------------


def run_original(runs: Path, name: str, work: Path, timeout: float) -> dict:
    """The original script over a folder holding only this run (a symlink to it)."""
    alone = work / "orig_in" / name
    alone.mkdir(parents=True)
    (alone / name).symlink_to(runs / name)
    out = work / "orig_out" / name
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(SEED), str(alone), str(out)],
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )
        rc, err = done.returncode, done.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        rc, err = "hang", ""
    states = {p.name: p.read_bytes() for p in out.glob("*.json")} if out.is_dir() else {}
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return {"rc": rc, "error": last, "states": states, "seconds": time.monotonic() - started}


def _first_bad_line_is_blank(episodes: Path) -> bool:
    """Whether the original's episode reading dies first on a blank line (documented)."""
    try:
        with open(episodes, encoding="utf-8") as f:
            for line in f:
                try:
                    json.loads(line)
                except ValueError:
                    return not line.strip(" \t\r\n")
    except (OSError, ValueError):
        return False
    return False


def run_original_without_blank_lines(runs: Path, name: str, work: Path, timeout: float):
    """The original on a copy whose blank lines are gone: where it crashed on one, the
    states it would write but for that (the README: blank lines are skipped here)."""
    if not _first_bad_line_is_blank(runs / name / "episodes.jsonl"):
        return None
    copies = work / "no_blank"
    copy = copies / name
    shutil.copytree(runs / name, copy, symlinks=True)
    data = (copy / "episodes.jsonl").read_bytes()
    from statepool_dagster.core.runs.episodes import lines_with_ends

    kept = [ln for ln in lines_with_ends(data) if ln.strip(b" \t\r\n")]
    (copy / "episodes.jsonl").write_bytes(b"".join(kept))
    result = run_original(copies, name, work / "no_blank_work", timeout)
    return result


def run_ours(runs: Path, work: Path, timeout: float) -> dict:
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEPOOL_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        STATEPOOL_RUNS_DIR=str(runs),
        STATEPOOL_STORE_DIR=str(work / "store"),
    )
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(STATEPOOL), "sync", "--json"],
            env=env,
            cwd=work,
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"rc": "hang", "report": None, "stderr": "", "seconds": timeout}
    stdout = done.stdout.decode("utf-8", "replace")
    try:
        report = json.loads(stdout)
    except ValueError:
        report = None
    return {
        "rc": done.returncode,
        "report": report,
        "stderr": done.stderr.decode("utf-8", "replace"),
        "seconds": time.monotonic() - started,
    }


def store_states(store: Path, run: str) -> dict[str, bytes]:
    d = store / "state_pool" / run
    if not d.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith(".")}


def store_rejects(store: Path, run: str) -> list[dict]:
    path = store / "rejects" / f"{run}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def compare(name: str, orig: dict, ours_run: dict | None, states: dict, rejects: list) -> list:
    """``[(level, message)]`` for one run; level FLAG (issue 14 broken) or NOTE (to review)."""
    out = []
    if ours_run is None:
        return [("FLAG", "run missing from the sync report")]
    if orig["rc"] == "hang":
        out.append(("NOTE", "the original hangs"))
    crashed = orig["rc"] != 0
    explained = bool(rejects) or bool(ours_run.get("ignored"))
    rej = "; ".join(f"{r['file']}:{r['line']} {r['error'][:70]}" for r in rejects[:3])
    for state in sorted(set(orig["states"]) | set(states)):
        mine, theirs = states.get(state), orig["states"].get(state)
        if mine == theirs:
            continue
        if theirs == b"" and crashed:
            if mine is not None:
                out.append(("NOTE", f"{state}: the original leaves it empty (crash while writing)"))
            continue
        level = "NOTE" if explained else "FLAG"
        what = "only ours" if theirs is None else "only the original" if mine is None else "differs"
        out.append((level, f"{state}: {what} (rejects: {rej or 'none'})"))
    if crashed and not explained:
        out.append(("FLAG", f"the original crashes ({orig['error'][:100]}), we reject nothing"))
    if crashed and explained:
        out.append(("NOTE", f"original crashes ({orig['error'][:80]}); ours: {rej}"))
    if not crashed and rejects:
        out.append(("NOTE", f"original succeeds; ours rejects: {rej}"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    work: Path = args.work
    if work.exists():
        shutil.rmtree(work)
    runs = work / "runs"
    names = [n for n in MUTATIONS if not args.only or any(p in n for p in args.only)]
    for i, name in enumerate(names):
        spec, fn = MUTATIONS[name]
        generate_run(runs / name, spec, i)
        fn(runs / name)
    print(f"{len(names)} run folders built", flush=True)
    flags = 0
    reports: dict[str, dict] = {}
    syncs = []
    if any(n in SECOND for n in names):
        syncs.append(run_ours(runs, work, args.timeout))
        for name in names:
            if name in SECOND:
                SECOND[name](runs / name)
        print("second mutations applied", flush=True)
    originals = {name: run_original(runs, name, work, 120) for name in names}
    for name in names:
        if originals[name]["rc"] != 0 and name not in NO_COMPARE:
            again = run_original_without_blank_lines(runs, name, work, 120)
            if again is not None:
                again["blank_lines"] = True
                originals[name] = again
    print("originals done", flush=True)
    syncs.append(run_ours(runs, work, args.timeout))
    for ours in syncs:
        print(f"sync: rc={ours['rc']} in {ours['seconds']:.0f}s", flush=True)
        if ours["rc"] != 0 or ours["report"] is None:
            print("FLAG sync:", ours["rc"], ours["stderr"][-3000:])
            flags += 1
        if "Traceback" in ours["stderr"]:
            print("FLAG sync stderr has a traceback:", ours["stderr"][-3000:])
            flags += 1
        for row in (ours["report"] or {}).get("runs", []):
            if not row.get("success") or row.get("error"):
                print(f"FLAG {row['run']}: run failed: {row.get('error')}")
                flags += 1
            reports[row["run"]] = row
    for name in names:
        if name in NO_COMPARE:
            print(f"{'ok  ' if name in reports else 'FLAG'} {name} (failures only)")
            flags += name not in reports
            continue
        found = compare(
            name,
            originals[name],
            reports.get(name),
            store_states(work / "store", name),
            store_rejects(work / "store", name),
        )
        if originals[name].get("blank_lines"):
            found.insert(0, ("NOTE", "documented: blank lines skipped; compared without them"))
        if name in DOCUMENTED:
            found = [("NOTE", f"documented: {DOCUMENTED[name]}: {m}") for _, m in found]
        for level, message in found:
            flags += level == "FLAG"
            print(f"{level} {name}: {message}")
        if not found:
            print(f"ok   {name}")
    print(f"{len(names)} runs, {flags} FLAG")
    return min(flags, 100)


if __name__ == "__main__":
    sys.exit(main())
