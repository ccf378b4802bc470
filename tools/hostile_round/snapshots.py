"""Mutations of the snapshots: bytes, cards, names, versions, missing folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec

from .episodes import BOM
from .registry import (
    BIG,
    SMALL,
    Mutation,
    _card_field,
    _lines,
    _set_lines,
    _snap,
    _snap_bytes,
    _splice_snapshot,
    _top_field,
    mutation,
)


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
