"""``statepool ingest FILE.jsonl --session NAME``: another tool's states, sealed into a session."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..core import Settings, plural
from .values import STEP


def add_parser(sub: Any) -> None:
    help_text = "seal a JSONL file of states into a session"
    p = sub.add_parser("ingest", help=help_text, description=help_text)
    p.add_argument(
        "file", help="JSONL file: one state a line, as CheckpointState.to_json writes it"
    )
    p.add_argument("--session", required=True, help="session name (the rules of run names)")
    p.add_argument(
        "--policy-step", type=STEP, default=None, help="policy step of every state (0 or more)"
    )
    p.add_argument("--writer", default=None, help="writer name (default ingest-<host>-<pid>)")
    p.add_argument(
        "--sessions", default=None, help="sessions root (default STATEPOOL_SESSIONS_DIR)"
    )
    p.add_argument(
        "--store", default=None, help="store root, for the rejects (default STATEPOOL_STORE_DIR)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but rejects")
    p.set_defaults(func=cmd_ingest)


def cmd_ingest(args: argparse.Namespace) -> int:
    """Each good line becomes a session line; each bad one is named (file, line) and set aside."""
    from ..core import RAW_LIMIT, Reject, StatepoolError, escape_bytes
    from ..core.segments import OversizeLine, SegmentWriter, iter_segment_lines
    from ..core.sessions import (
        check_session_name,
        default_writer_name,
        ensure_spec,
        parse_state_line,
        segments_dir,
        session_dir,
        session_line,
    )

    settings = Settings.from_env(sessions_dir=args.sessions, store_dir=args.store)
    source = Path(args.file).absolute()  # rejects name the file wherever they are read
    if source.is_dir():
        raise StatepoolError(f"{source}: a folder, not a JSONL file")
    if not source.is_file():
        raise StatepoolError(f"{source}: no such file")
    try:
        check_session_name(args.session)
    except ValueError as exc:
        raise StatepoolError(str(exc)) from None
    ensure_spec(session_dir(settings.sessions_dir, args.session), None)
    writer = SegmentWriter(
        segments_dir(settings.sessions_dir, args.session),
        args.writer or f"ingest-{default_writer_name()}",
        max_age=float("inf"),
    )
    rejects: list[Reject] = []
    count = 0
    with writer:
        for number, raw in iter_segment_lines(source):
            if isinstance(raw, OversizeLine):
                error = f"a line of {raw.length} bytes, over the limit"
                rejects.append(Reject(file=str(source), line=number, error=error, raw=None))
                continue
            try:
                item = parse_state_line(raw, number)
            except ValueError as exc:
                raw_text = escape_bytes(raw[:RAW_LIMIT])
                rejects.append(Reject(file=str(source), line=number, error=str(exc), raw=raw_text))
                continue
            state = item.state.to_dict()
            state["state_id"] = item.written_id
            provenance: dict[str, Any] = {"meta": {"ingested_from": str(source), "line": number}}
            step = args.policy_step if args.policy_step is not None else item.policy_step
            if step is not None:
                provenance = {"policy_step": step, **provenance}
            writer.append(session_line(state, provenance))
            count += 1
    for reject in rejects:
        print(f"statepool ingest: {reject.describe()}", file=sys.stderr)
    if rejects:
        _keep_rejects(settings, args.session, writer.name, rejects)
    if not args.quiet:
        sealed = ", ".join(writer.sealed) or "nothing"
        print(
            f"ingested {plural(count, 'state')} into session {args.session} ({sealed}); "
            f"{plural(len(rejects), 'reject')}"
        )
    return 1 if rejects else 0


def _keep_rejects(settings: Settings, session: str, writer: str, rejects: list) -> None:
    """Add the rejects to ``session_rejects/<session>/<writer>.ingest.jsonl`` (a writer
    named again adds to its file), where the session's totals count them."""
    import contextlib

    from ..core.names import RejectSource
    from ..core.sessions import SessionFolders
    from ..core.store import reject_line, write_bytes_atomic

    lines = [reject_line(r, RejectSource.INGEST) for r in rejects]
    path = SessionFolders(settings.store_dir, session).ingest_rejects(writer)
    data = b""
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
    write_bytes_atomic(path, data + ("\n".join(lines) + "\n").encode("utf-8"))
