"""Which copy of each state a trainer gets: the one set of rules ``statepool export`` writes
and the live pool serves.

:class:`CopyRules` is fed a pool's copies in the export's order (runs by natural name, each
run's checkpoints in order; then sessions by name, each session's states in order) and
says of each whether it is kept:

- a run state is kept unless an earlier one has its content (its 16-byte digest): the
  earliest run by name keeps a duplicate;
- a session state is left out when a run gave a state of its id or of its content, when an
  earlier session kept its id or its content (the earliest session keeps it), with
  ``max_staleness`` when its policy step is more than that behind its session's newest (or
  unknown), and when it has no prompt (its rendering was rejected). Only a session's first
  copy of a state counts.

The export streams every copy through one ``CopyRules`` (memory: one digest and id per
state kept, never the states); the live pool runs one over each group of copies that share
an id or a digest whenever one of them changes. What is kept then meets the feedback
selection (``feedback.select.Selection.decide``: left out, or weighed) and the split asked for.
"""

from __future__ import annotations

from ..names import parse_run_state_id

RUN_WINS = "a run state wins"


def kept_alone(run: bool, prompt: bool) -> bool:
    """What :class:`CopyRules` (with no staleness limit) decides for a copy that shares
    neither its id nor its digest with any other: a run's is kept, a session's when it has
    a prompt."""
    return run or prompt


class CopyRules:
    """The copies kept so far, by digest and id; feed copies in the export's order.

    ``sessions``: session copies follow (the ids of run states are kept for them).
    ``repeats``: a session may give a state more than once (its first copy counts); the
    export's session reader gives each state once, so it passes ``False`` and keeps no
    set of them.
    """

    __slots__ = ("_firsts", "kept", "max_staleness", "run_ids", "seen")

    def __init__(
        self, *, sessions: bool = True, repeats: bool = False, max_staleness: int | None = None
    ):
        self.seen: dict[bytes, str] = {}  # a kept copy's digest -> its state id
        self.run_ids: set[str] | None = set() if sessions else None
        self.kept: dict[str, str] = {}  # a kept session state's id -> its session
        self.max_staleness = max_staleness
        self._firsts: set[tuple[str, str]] | None = set() if repeats else None

    def run_copy(self, state_id: str, digest: bytes) -> str | None:
        """``None`` when the run's copy is kept; else the id of the state that has its content."""
        if self.run_ids is not None:
            self.run_ids.add(state_id)
        winner = self.seen.get(digest)
        if winner is not None:
            return winner
        self.seen[digest] = state_id
        return None

    def session_id(self, session: str, state_id: str) -> str | None:
        """Why a session's copy is left out by its id alone (``""``: a later copy of a state
        the session gave already); ``None``: its content decides (:meth:`session_copy`)."""
        if self._firsts is not None:
            first = (session, state_id)
            if first in self._firsts:
                return ""
            self._firsts.add(first)
        if self.run_ids is not None and state_id in self.run_ids:
            return f"identical to {self._winner(state_id)} ({RUN_WINS})"
        if state_id in self.kept:
            return f"identical to {self._winner(state_id)}"
        return None

    def session_copy(
        self,
        session: str,
        state_id: str,
        digest: bytes,
        *,
        prompt: bool,
        policy_step: int | None = None,
        oldest: int | None = None,
    ) -> str | None:
        """Why a session's copy that :meth:`session_id` let through is left out, or ``None``
        when it is kept. ``oldest``: the oldest policy step the session's newest allows."""
        winner = self.seen.get(digest)
        if winner is not None:
            why = RUN_WINS if winner not in self.kept else "the earliest keeps"
            return f"identical to {self._winner(winner)} ({why})"
        if self.max_staleness is not None and (
            policy_step is None or oldest is None or policy_step < oldest
        ):
            what = (
                "without a policy step"
                if policy_step is None
                else f"older than policy step {oldest}"
            )
            return f"{what} (--max-staleness {self.max_staleness})"
        if not prompt:
            return "without a prompt (its rendering was rejected)"
        self.seen[digest] = state_id
        self.kept[state_id] = session
        return None

    def session_state(self, session: str, state_id: str, digest: bytes, prompt: bool) -> bool:
        """Whether a session's copy is kept (no staleness limit): both steps at once."""
        if self.session_id(session, state_id) is not None:
            return False
        return self.session_copy(session, state_id, digest, prompt=prompt) is None

    def _winner(self, state_id: str) -> str:
        kept_by = self.kept.get(state_id)
        if kept_by:
            return f"session {kept_by}'s"
        parsed = parse_run_state_id(state_id)
        return f"{parsed[0] if parsed else state_id}'s"
