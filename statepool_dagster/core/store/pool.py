"""A run's state files and rejects: ``state_pool/<run>/*.json`` and ``rejects/<run>.jsonl``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from ..locations import AnyPath, is_local
from ..names import DIR_MANIFEST
from ..rejects import Reject
from ..states.models import BytesLike
from .atomic import _digest, _entries, _make_folder, _put, write_bytes_atomic
from .layout import StoreLayout


def state_pool_names(layout: StoreLayout, run: str) -> set[str]:
    """The state ids that have a file in ``state_pool/<run>/``."""
    folder = layout.state_pool(run)
    if is_local(folder):
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        return {n[: -len(".json")] for n in names if n.endswith(".json") and n[0] != "."}
    return {
        p.name[: -len(".json")]
        for p in _entries(layout.state_pool(run))
        if p.name.endswith(".json") and not p.name.startswith(".")
    }


def _utf8(text: str | BytesLike) -> BytesLike:
    return text.encode("utf-8") if isinstance(text, str) else text


def write_state_file(layout: StoreLayout, run: str, state_id: str, text: str | BytesLike) -> None:
    """One ``state_pool/<run>/<state_id>.json`` (text, or its UTF-8 bytes), written atomically."""
    write_bytes_atomic(layout.state_pool(run) / f"{state_id}.json", _utf8(text))


def file_digest(text: str | BytesLike) -> str:
    """The digest a folder manifest records for a state file of ``text`` (or its UTF-8 bytes)."""
    return _digest(_utf8(text))


def update_state_pool(
    layout: StoreLayout,
    run: str,
    writes: Mapping[str, str | BytesLike],
    keep: set[str],
    written: dict[str, str] | None = None,
    present: set[str] | None = None,
) -> None:
    """Write each ``writes`` file on its own (atomically), drop the files not kept.

    Files of ``keep`` are left as they are: a new checkpoint writes one file, never the
    folder. ``written``: digests of the files already written one by one this build.
    Through fsspec each file is one put, then the folder's manifest is rewritten.
    ``present``: the state ids that have a file now, if the caller knows (else listed).
    """
    folder = layout.state_pool(run)
    _make_folder(folder)  # a run without states still has its (empty) folder
    if present is None:
        present = state_pool_names(layout, run)
    for sid, text in writes.items():
        write_bytes_atomic(folder / f"{sid}.json", _utf8(text))
    if not is_local(folder):
        fresh = {**(written or {}), **{sid: file_digest(text) for sid, text in writes.items()}}
        _update_manifest(folder, fresh, keep)
    for sid in present - keep - set(writes):
        (folder / f"{sid}.json").unlink(missing_ok=True)


def _update_manifest(folder: AnyPath, fresh: dict[str, str], keep: set[str]) -> None:
    """Rewrite the manifest: ``fresh`` digests, the old ones of unchanged files kept."""
    try:
        named = json.loads((folder / DIR_MANIFEST).read_bytes())["files"]
    except (FileNotFoundError, KeyError, ValueError):
        named = {}
    files = {n: d for n, d in named.items() if n[: -len(".json")] in keep}
    files.update({f"{sid}.json": d for sid, d in fresh.items()})
    for sid in keep:
        name = f"{sid}.json"
        if name not in files and (folder / name).exists():
            files[name] = _digest((folder / name).read_bytes())
    manifest = json.dumps({"files": files}, ensure_ascii=False, indent=1, sort_keys=True)
    _put(folder / DIR_MANIFEST, manifest.encode("utf-8"))


def read_rejects(layout: StoreLayout, run: str, source: str | None = None) -> list[Reject]:
    """The rejects in ``rejects/<run>.jsonl`` (of one ``source`` if given), in written order."""
    path = layout.rejects(run)
    if not path.exists():
        return []
    rejects = []
    for text in _lines(path):
        if not text.strip():
            continue
        record = json.loads(text)
        if record.pop("source", None) == source or source is None:
            rejects.append(Reject.model_validate(record))
    return rejects


# What ``str.splitlines`` also ends a line at and ``json.dumps`` leaves raw in a string.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def reject_line(reject: Reject, source: str) -> str:
    """One JSON line; a rejected line's own ``\u2028`` or ``\x85`` stays escaped, so a reader
    splitting with ``splitlines`` (not only at ``\n``, as ours do) sees one reject per line."""
    record = {**reject.model_dump(), "source": source}
    return json.dumps(record, ensure_ascii=False).translate(_LINE_BREAKS)


def update_rejects(layout: StoreLayout, run: str, source: str, rejects: Iterable[Reject]) -> None:
    """Replace one source's rejects (e.g. ``episodes``) in ``rejects/<run>.jsonl``.

    The file is removed once no source has any rejects left.
    """
    lines = [reject_line(r, source) for r in rejects]
    path = layout.rejects(run)
    if not lines and is_local(path) and not os.path.lexists(path):
        return  # nothing to set aside, nothing set aside before: no lock, no write
    with layout.lock(run):
        kept: list[str] = []
        if path.exists():
            for text in _lines(path):
                if text.strip() and json.loads(text).get("source") != source:
                    kept.append(text)
        kept.extend(lines)
        if kept:
            write_bytes_atomic(path, ("\n".join(kept) + "\n").encode("utf-8"))
        else:
            path.unlink(missing_ok=True)


def _lines(path: AnyPath) -> list[str]:
    """The records of a rejects file: split where its writer split them, at ``\n`` only
    (``splitlines`` would also cut at U+2028 or NEL, which a file from an older version
    may hold raw inside a record)."""
    return path.read_bytes().decode("utf-8").split("\n")
