"""``curator_prompts``: one prompt per state, rendered only when its state or spec changed."""

from __future__ import annotations

import functools
import hashlib
import inspect
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import PromptInputError
from ..locations import storage_errors
from ..names import PROMPTS, SNAPSHOTS_DIR, STATES, RejectSource, run_state_id
from ..prompts.render import build_curator_prompt
from ..prompts.spec import PromptSpec
from ..prompts.template import format_episodes, surrogate_problem
from ..rejects import Reject
from ..states.join import PlannedState
from ..states.models import CheckpointState
from ..store.parts import RunTable
from ..store.rows import PromptRow, release_arrow_memory, utf8_views
from .job import RENDER_VERSION, OpenTables, StageReport, digest
from .runner import Stage, StagePass, View

COLUMNS = ["state_id", "version", "library_version", "reference_ops", "input_key"]


@functools.cache  # the package's own code: it does not change while the process runs
def bundled_source(func: Callable[..., Any]) -> bytes:
    """The source of ``func`` and of the functions of its module it calls (by name, at any
    depth): what the bundled formatter runs, and nothing else of the module it shares."""
    module = sys.modules.get(func.__module__)
    found: dict[str, str] = {}
    todo = [func]
    while todo:
        current = todo.pop()
        if current.__qualname__ in found:
            continue
        found[current.__qualname__] = inspect.getsource(current)
        codes = [current.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if inspect.iscode(c)]
            called = (getattr(module, name, None) for name in code.co_names)
            todo += [f for f in called if inspect.isfunction(f) and f.__module__ == func.__module__]
    return "\0".join(found[name] for name in sorted(found)).encode()


def _formatter_identity(formatter: Callable[..., Any]) -> str:
    """Name plus the bytes of the file defining it (an edit anywhere in it renders again);
    for the bundled formatter, its own code only."""
    name = f"{getattr(formatter, '__module__', '')}.{getattr(formatter, '__qualname__', '')}"
    try:
        if formatter is format_episodes:
            source = bundled_source(formatter)
        else:
            source = Path(inspect.getsourcefile(formatter) or "").read_bytes()
    except (OSError, TypeError):
        code = getattr(formatter, "__code__", None)
        source = repr((code.co_code, code.co_consts)).encode() if code else b""
    return f"{name}:{hashlib.blake2b(source, digest_size=16).hexdigest()}:{RENDER_VERSION}"


def spec_digest(spec: PromptSpec) -> str:
    """Digest of everything a prompt is rendered with besides its state."""
    return digest(
        spec.template,
        spec.param_rule,
        repr(list(spec.tool_specs.items())),  # in order: the order is the prompt's
        _formatter_identity(spec.episode_formatter),
        spec.limits.model_dump_json(),
    )


class RenderedPrompts:
    """Prompts handed from the states stage to the prompts stage of one step, by state key,
    up to a budget of characters (a constant, not a run): the states stage renders from the
    state it has decoded, the prompts stage then reads and decodes none of these states.

    An entry is ``(render key, prompt or the reason it cannot be rendered, row values)``.
    """

    BUDGET = 1 << 19  # characters: a small run's prompts, all of them

    def __init__(self, spec: PromptSpec) -> None:
        self.spec = spec  # what both stages render under: loaded once, by the step runner
        self.spec_key = spec_digest(spec)
        self._entries: dict[str, tuple[str, str, bool, dict[str, Any]]] = {}
        self._size = 0

    def full(self) -> bool:
        return self._size >= self.BUDGET

    def put(self, key: str, render_key: str, text: str, ok: bool, row: dict[str, Any]) -> None:
        """Keep ``text`` (the prompt if ``ok``, else why not) unless the budget is spent."""
        if self._size + len(text) <= self.BUDGET and key not in self._entries:
            self._entries[key] = (render_key, text, ok, row)
            self._size += len(text)

    def take(self, key: str, render_key: str) -> tuple[str, bool, dict[str, Any]] | None:
        """The entry of state ``key`` if rendered under ``render_key`` (and let go)."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._size -= len(entry[1])
        return entry[1:] if entry[0] == render_key else None


def prompt_text(state: CheckpointState, spec: PromptSpec) -> str:
    """The prompt of ``state``; :class:`PromptInputError` if it cannot be rendered or stored."""
    prompt = build_curator_prompt(state, spec)
    unstorable = surrogate_problem(prompt)  # e.g. from a custom episode formatter
    if unstorable:
        raise PromptInputError(f"cannot store the prompt: {unstorable}")
    return prompt


class PromptHandOver:
    """The states stage's side of :class:`RenderedPrompts`: it renders the prompt of each
    state it builds, from the state it has decoded, when there is a hand-over (the step's
    prompts stage follows), the prompt is not stored already and the hand-over has room."""

    def __init__(self, run: str, tables: OpenTables, handover: RenderedPrompts | None) -> None:
        self.run = run
        self.spec: PromptSpec | None = None
        if handover is None:
            return
        self.rendered = handover
        try:
            self.stored = tables.open(PROMPTS, run).parts
        except (*storage_errors(), ValueError, KeyError):  # a bad table: the prompts stage says so
            return
        self.spec, self.spec_key = handover.spec, handover.spec_key

    def offer(
        self,
        name: str,
        key: str,
        text_digest: str,
        state: Callable[[], CheckpointState],
        plan: PlannedState,
        ops: str,
    ) -> None:
        """State ``name`` built (its input ``key``, its text's digest, ``state()`` it decoded,
        its plan and reference ops): render its prompt."""
        if self.spec is None or self.rendered.full():
            return
        render_key = digest(self.spec_key, text_digest)
        stored = self.stored.get(name)
        if stored is not None and stored.info.get("render") == render_key:
            return  # kept as it is stored: nothing to render
        try:
            text, ok = prompt_text(state(), self.spec), True
        except PromptInputError as exc:
            text, ok = str(exc), False
        except Exception:  # not a prompt's fault: the prompts stage meets it again and fails
            return
        row = {
            "state_id": run_state_id(self.run, plan.version),
            "version": plan.version,
            "library_version": plan.library_version,
            "reference_ops": ops,
            "input_key": key,
        }
        self.rendered.put(key, render_key, text, ok, row)


def _read_state(states: RunTable, name: str) -> CheckpointState:
    """A stored state, parsed straight from where Arrow holds its text, which is then let go."""
    text = states.read_part(name, ["state"])["state"]
    size = text.nbytes
    release_arrow_memory(size)  # the pages it was read from
    state = CheckpointState.trusted(utf8_views(text)[0])
    del text
    release_arrow_memory(size)  # not kept beside the parsed state while it is rendered
    return state


def _first_prompt(rows: list[tuple[str]]) -> str:
    return f"```\n{rows[0][0]}\n```" if rows else "_no prompts_"


def _first_prompt_read(head: pa.Table) -> str:
    return _first_prompt([(prompt,) for prompt in head["prompt"].to_pylist()])


FIRST_PROMPT = View("first_prompt", ["prompt"], 1, _first_prompt_read, _first_prompt)
STAGE = Stage(PROMPTS, RejectSource.PROMPTS, FIRST_PROMPT)


def build_prompts(
    run: str, tables: OpenTables, spec: PromptSpec, handover: RenderedPrompts | None = None
) -> StageReport:
    """``curator_prompts``: one prompt per state, rendered under ``spec``; a state that cannot
    be rendered is a reject. ``handover``: the prompts the step's states stage rendered.
    """
    spec_key = handover.spec_key if handover and handover.spec is spec else spec_digest(spec)
    states = tables.open(STATES, run)
    stage = StagePass(STAGE, run, tables)
    table = stage.table
    rendered = 0
    for name in states.names():
        state_part = states.parts[name]
        part = table.parts.get(name)
        # The key below is a digest of these: where they match, so does the key (a long
        # run's prompts are checked without computing one each).
        made_from = [spec_key, state_part.key, state_part.info.get("text")]
        if part is not None and part.info.get("from") == made_from:
            stage.keep(name)
            continue
        # A prompt shows the state, never its reference ops: a new key with the same
        # rendering (e.g. the last state once a next library exists) keeps its text.
        render_key = digest(spec_key, state_part.info.get("text", state_part.key))
        key = digest(render_key, state_part.key)
        if stage.reuse(name, key):
            continue
        handed = None if handover is None else handover.take(state_part.key, render_key)
        if handed is not None:
            prompt, ok, row = handed
            problem = None if ok else prompt
        else:
            row = states.read_part(name, COLUMNS).to_pylist()[0]
        if handed is None and part is not None and part.info.get("render") == render_key:
            prompt = table.read_part(name, ["prompt"])["prompt"][0].as_py()
        else:
            if handed is None:
                try:
                    prompt, problem = prompt_text(_read_state(states, name), spec), None
                except PromptInputError as exc:
                    problem = str(exc)
            if problem is not None:  # the state is kept as the original keeps it
                library = f"{run}/{SNAPSHOTS_DIR}/skills_v{row['library_version']}.json"
                error = f"{row['state_id']}: {problem}"
                stage.rejects.append(Reject(file=library, line=None, error=error, raw=None))
                stage.drop(name)
                continue
            rendered += 1
        record = PromptRow(
            state_id=row["state_id"],
            run=run,
            version=row["version"],
            prompt=prompt,
            prompt_chars=len(prompt),
            reference_ops=row["reference_ops"],
            input_key=key,
            state_key=row["input_key"],
        )
        info = {
            "chars": len(prompt),
            "state_id": row["state_id"],  # with chars, what the checks read (not the rows)
            "rows": 1,
            "render": render_key,
            "from": made_from,
        }
        stage.write_row(name, record, key, info)
    stage.finish(states.marks.get("fingerprint", ""))
    return _report(stage, rendered)


def _report(stage: StagePass, rendered: int) -> StageReport:
    lengths = [info["chars"] for info in stage.infos()]
    reused = len(lengths) - rendered  # a prompt whose text was kept is not rendered again
    return stage.report(
        {
            "prompts": len(lengths),
            "reused": reused,
            "rejects": len(stage.rejects),
            "prompt_chars_min": min(lengths, default=0),
            "prompt_chars_median": float(statistics.median(lengths)) if lengths else 0.0,
            "prompt_chars_max": max(lengths, default=0),
        },
        reused=reused,
    )
