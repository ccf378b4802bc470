"""Sidecars, and runs changed between a first and a second sync."""

from __future__ import annotations

import shutil
from pathlib import Path

from statepool_dagster.demo.sample_runs import SampleSpec

from .episodes import BOM
from .registry import (
    NO_COMPARE,
    SECOND,
    SMALL,
    Mutation,
    _card_field,
    _eps,
    _eps_bytes,
    _snap,
    _snap_bytes,
    mutation,
)


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
