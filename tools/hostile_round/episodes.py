"""Mutations of episodes.jsonl: line endings, encodings, escapes, duplicate keys, numbers."""

from __future__ import annotations

import json

from statepool_dagster.demo.sample_runs import SampleSpec

from .registry import _eps_bytes, _lines, _raw_episode_line, _set_lines, _splice_episode, mutation

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
