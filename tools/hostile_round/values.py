"""Odd values in every episode field and card field; int64 edges; many snapshots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec

from .registry import (
    Mutation,
    _eps_bytes,
    _lines,
    _set_lines,
    _snap,
    _splice_episode,
    _splice_snapshot,
    mutation,
)

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
