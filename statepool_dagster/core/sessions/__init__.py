"""Sessions: states written by rollout workers while they run, the pool's second source.

The face: where sessions live and which exist, a session's spec, its lines written
(``StateWriter``, ``session_line``) and read (``parse_line``), its stored tables
(``SessionFolders``) and the segments a build has not read yet.
"""

from __future__ import annotations

from ..faces import lazy_face

__all__ = [
    "INDEX",
    "SEGMENTS_DIR",
    "SessionFolders",
    "SessionSpecMismatch",
    "SessionState",
    "StateWriter",
    "check_session_name",
    "default_writer_name",
    "discover_sessions",
    "ensure_spec",
    "parse_line",
    "parse_state_line",
    "pending_segments",
    "segments_dir",
    "session_dir",
    "session_line",
    "session_name_problem",
    "session_prompt",
    "stored_sessions",
]

# On first use: finding the sessions (every sync) must not load the writer's Arrow.
__getattr__, __dir__ = lazy_face(
    __name__,
    __all__,
    {
        "build": "pending_segments",
        "layout": "INDEX SEGMENTS_DIR check_session_name discover_sessions segments_dir"
        " session_dir session_name_problem stored_sessions",
        "read": "SessionState parse_line parse_state_line",
        "spec": "SessionSpecMismatch ensure_spec",
        "store": "SessionFolders session_prompt",
        "writer": "StateWriter default_writer_name session_line",
    },
)
