"""``StateWriter``: how a rollout worker adds states to a session while it runs."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from typing import Any

from ..locations import AnyPath, as_path
from ..ranges import check
from ..segments.writer import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_RECORDS,
    Closing,
    SegmentWriter,
)
from .layout import check_session_name, segments_dir, session_dir
from .provenance import PROVENANCE_KEY, provenance_fields
from .spec import ensure_spec


def default_writer_name() -> str:
    """``<host>-<pid>``: one writer per process, distinct across machines."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()).lstrip(".") or "host"
    return f"{host[:80]}-{os.getpid()}"


def state_text(state: Any) -> bytes:
    """A state's JSON object as the original's ``to_json`` writes it, in UTF-8."""
    if isinstance(state, bytes | bytearray | memoryview):
        text = bytes(state)
    elif isinstance(state, str):
        text = state.encode("utf-8")
    elif isinstance(state, dict):
        text = json.dumps(state, ensure_ascii=False).encode("utf-8")
    elif hasattr(state, "to_json"):
        text = state.to_json().encode("utf-8")
    else:
        raise TypeError(
            f"a state is a CheckpointState, a dict or its JSON, not {type(state).__name__}"
        )
    text = text.strip()
    if not text.startswith(b"{") or text[1:].lstrip().startswith(b"}"):
        raise ValueError("a state's JSON must be an object with its fields")
    return text


def session_line(state: Any, provenance: dict[str, Any]) -> bytes:
    """The line a segment holds: the state's object with the provenance key first."""
    head = json.dumps({PROVENANCE_KEY: provenance}, ensure_ascii=False).encode("utf-8")
    return head[:-1] + b", " + state_text(state)[1:]


class StateWriter(Closing):
    """Append states to ``<session_root>/<session>/segments/`` from one rollout worker.

    ``append`` is a buffered write; segments are sealed when full, after ``max_age``
    seconds (on the next append) and on :meth:`close`. ``spec`` is written to
    ``session.json`` by the first writer; a different spec is refused.
    """

    def __init__(
        self,
        session_root: str | os.PathLike[str] | AnyPath,
        session: str,
        *,
        spec: dict[str, Any] | None = None,
        writer: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_age: float = DEFAULT_MAX_AGE,
        fsync: bool = True,
    ) -> None:
        self.session = check_session_name(session)
        root = as_path(session_root)
        self.spec = ensure_spec(session_dir(root, session), spec)
        self.segments = SegmentWriter(
            segments_dir(root, session),
            writer or default_writer_name(),
            max_bytes=max_bytes,
            max_records=max_records,
            max_age=max_age,
            fsync=fsync,
        )

    @property
    def writer(self) -> str:
        return self.segments.name

    @property
    def sealed(self) -> list[str]:
        """Segments this writer sealed, in order."""
        return self.segments.sealed

    def append(
        self,
        state: Any,
        *,
        policy_step: int,
        parent_state_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Add one state (a ``CheckpointState``, its dict, or its ``to_json`` text)."""
        if type(policy_step) is not int:
            raise TypeError(f"policy_step must be an int, not {type(policy_step).__name__}")
        check("policy_step", policy_step)
        provenance: dict[str, Any] = {"policy_step": policy_step, "time": time.time()}
        if parent_state_id is not None:
            provenance["parent_state_id"] = str(parent_state_id)
        if meta:
            provenance["meta"] = meta
        provenance_fields(provenance)  # what a reader of the line would refuse is not written
        self.segments.append(session_line(state, provenance))

    def seal(self) -> str | None:
        """Seal the open segment now (e.g. at the end of a policy step)."""
        return self.segments.seal()

    def close(self) -> None:
        self.segments.close()
