"""``session.json``: what drove a session (model, policy checkpoint, dataset, …), written once."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any

from ..errors import StatepoolError
from ..locations import AnyPath, is_local
from ..store.atomic import put_new
from .layout import SESSION_FILE


class SessionSpecMismatch(StatepoolError):
    """A writer brought a spec different from the one the session was started with."""


def _canonical(spec: dict[str, Any]) -> bytes:
    return json.dumps(spec, ensure_ascii=False, sort_keys=True, indent=1).encode("utf-8") + b"\n"


def read_spec(folder: AnyPath) -> dict[str, Any] | None:
    """The session's spec, or ``None`` when none was written."""
    try:
        return json.loads((folder / SESSION_FILE).read_bytes())
    except FileNotFoundError:
        return None


def _create_local(path: AnyPath, data: bytes) -> bool:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # exclusive: the first writer's spec stays
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def ensure_spec(folder: AnyPath, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """Write ``spec`` as the session's spec unless one exists; refuse a different one."""
    if spec is not None:
        try:
            data = _canonical(spec)
        except (TypeError, ValueError) as exc:
            raise StatepoolError(f"session spec is not JSON: {exc}") from None
        path = folder / SESSION_FILE
        if is_local(folder):
            folder.mkdir(parents=True, exist_ok=True)
            created = _create_local(path, data)
        else:
            created = put_new(path, data)  # the first writer's spec stays
        if created:
            return spec
    existing = read_spec(folder)
    if spec is not None and existing is not None and _canonical(existing) != _canonical(spec):
        mine = json.dumps(spec, sort_keys=True, ensure_ascii=False)[:300]
        theirs = json.dumps(existing, sort_keys=True, ensure_ascii=False)[:300]
        raise SessionSpecMismatch(
            f"{folder / SESSION_FILE}: this session was started with a different spec; "
            f"its spec is {theirs}, this writer's is {mine} (use a new session name)"
        )
    return existing
