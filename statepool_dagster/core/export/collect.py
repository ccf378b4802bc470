"""Gather every run of the store into one export, a checkpoint at a time: states paired with
prompts, split by run, duplicates named.

``export_rows`` yields the rows as it reads them and keeps none: memory does not grow with
the pool. De-duplication (``export.selection.CopyRules``, the rules the live pool serves by)
keeps one 16-byte digest (blake2b of a state's library and batch) per distinct state,
mapped to the id of the state that kept it, never the states themselves (the performance
page gives its size). Runs are read in natural order and each run's checkpoints in order,
so the earliest run by name keeps a duplicate.

Sessions are read after the runs (``export.sessions``), 16 states at a time. Where the
store has sessions, the ids of run states and of kept session states are kept too
(an id a state), so that a run state wins over a session's of its id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pyarrow as pa

from ..feedback.select import Selection, describe
from ..names import PROMPTS, STATES, run_name_problem
from ..runs.files import natural_key
from ..sessions.layout import stored_sessions
from ..states.digest import state_text_digest
from ..store.atomic import READ_RETRY_DELAYS
from ..store.cells import compact, text_cells
from ..store.layout import StoreLayout
from ..store.part_files import READ_ATTEMPTS
from ..store.parts import RunTable
from ..store.reading import CheckpointBatches
from ..store.schemas import SCHEMAS
from ..words import plural
from .gate import Gate, LengthFilter
from .rows import (
    RUNS,
    SESSIONS,
    ExportOptions,
    ExportRow,
    ExportSet,
    SourceOptions,
    run_row,
    split_of,
)
from .selection import CopyRules
from .sessions import SessionRows

STATE_COLUMNS_READ = ["state_id", "version", "state", "reference_ops"]
DIGEST = "digest"  # a state row's recorded digest (None: its part's facts have none)
PROMPT_COLUMNS_READ = ["state_id", "prompt", "reference_ops"]


class _Disagree(Exception):
    """A run's prompts were not rendered from its current states."""


# Checkpoints read at a time (a state is a checkpoint's library and batch): a run of up to
# this many is read in one call per part file.
BATCH = 32


def _open(layout: StoreLayout, asset: str, run: str) -> CheckpointBatches:
    return CheckpointBatches(RunTable(layout.table(asset, run), SCHEMAS[asset]))


def tables_agree(prompts: CheckpointBatches, states: CheckpointBatches) -> bool:
    """Each prompt records the key of the state it was rendered from: do they all match?

    Read from the facts the prompts stage keeps per checkpoint (no row read); from the key
    columns where a store predates them.
    """
    made = [part.info.get("from") for part in prompts.table.parts.values()]
    if all(isinstance(m, list) and len(m) >= 2 for m in made):
        stored = states.table.parts
        return all(
            name in stored and stored[name].key == part.info["from"][1]
            for name, part in prompts.table.parts.items()
        )
    rendered = prompts.read(prompts.names(), ["state_id", "state_key"])
    current = states.read(states.names(), ["state_id", "input_key"])
    keys = dict(zip(current["state_id"].to_pylist(), current["input_key"].to_pylist(), strict=True))
    pairs = zip(rendered["state_id"].to_pylist(), rendered["state_key"].to_pylist(), strict=True)
    return all(keys.get(sid) == key for sid, key in pairs)


def _agreeing_tables(layout: StoreLayout, run: str) -> tuple[CheckpointBatches, CheckpointBatches]:
    """The run's prompt and state tables once they agree.

    A run being rebuilt has new states before it has their prompts: read both again (for
    up to about five seconds) until every prompt's state is the stored one.
    """
    for delay in (*READ_RETRY_DELAYS, None):
        prompts, states = _open(layout, PROMPTS, run), _open(layout, STATES, run)
        try:
            if tables_agree(prompts, states):
                return prompts, states
        except FileNotFoundError:  # a part went meanwhile: its rows are in a newer one
            pass
        prompts.close()
        states.close()
        if delay is not None:
            time.sleep(delay)
    raise _Disagree(run)


def _rows(table: pa.Table, text: str) -> list[dict]:
    """The table's rows as dicts, its column ``text`` left in Arrow (a cell a row)."""
    rows = table.drop_columns([text]).to_pylist()
    for row, cell in zip(rows, text_cells(table.column(text)), strict=True):
        row[text] = cell
    return rows


def _run_pairs(layout: StoreLayout, run: str) -> Iterator[list[tuple[dict, dict | None]]]:
    """``(prompt row, state row)`` of each of the run's states, a list a batch of checkpoints;
    the prompt and the state are texts left in Arrow.

    A writer that merges or prunes parts meanwhile removes files this listing named: the
    tables are then opened (and checked) again, and reading resumes at the next checkpoint.
    """
    done: set[str] = set()
    for _ in range(READ_ATTEMPTS):
        prompts, states = _agreeing_tables(layout, run)
        try:
            for names, prompt_table in prompts.batches(PROMPT_COLUMNS_READ, BATCH, skip=done):
                parts = states.table.parts
                have = [n for n in names if n in parts]
                state_rows = _rows(states.read(have, STATE_COLUMNS_READ), "state")
                for name, row in zip(have, state_rows, strict=True):
                    row[DIGEST] = parts[name].info.get("digest")
                by_id = {row["state_id"]: row for row in state_rows}
                done.update(names)
                yield [(row, by_id.get(row["state_id"])) for row in _rows(prompt_table, "prompt")]
            return
        except FileNotFoundError:
            continue
        finally:
            prompts.close()
            states.close()
    raise _Disagree(run)


def _store_runs(layout: StoreLayout) -> list[str]:
    both = set(layout.runs_with(PROMPTS)) & set(layout.runs_with(STATES))
    return sorted((r for r in both if run_name_problem(r) is None), key=natural_key)


def export_rows(
    store: str | os.PathLike[str],
    export: ExportSet,
    lengths: LengthFilter | None = None,
    sources: SourceOptions | None = None,
    selection: Selection | None = None,
    only: frozenset[str] | None = None,
) -> Iterator[ExportRow]:
    """Every state of every run (then every session) in the store, split by run (by session)
    and de-duplicated, as it is read.

    A run state's prompt and state are texts left in Arrow (``ExportRow.in_python`` makes
    them ``str``). ``export`` counts what was yielded and gathers the problems; they are
    complete once the iterator is exhausted. ``lengths`` measures each prompt and leaves
    out the long; ``sources`` picks runs and/or sessions and how fresh session states must be;
    ``selection`` leaves out (and weighs) states by their feedback statistics; ``only``,
    when given, leaves out every state not in it (a pool version's states).
    """
    sources = sources or SourceOptions()
    options = export.options
    layout = StoreLayout(store)
    sessions = stored_sessions(store) if SESSIONS in sources.sources else []
    export.with_sessions = bool(sessions)
    if sources.active:
        export.extra["sources"] = {
            "sources": list(sources.sources),
            "max_staleness": sources.max_staleness,
        }
    if selection is not None and selection.options.active:
        export.weighted = selection.options.weight is not None
        export.extra["selection"] = describe(selection.options)
    gate = Gate(export, lengths, selection, only)
    rules = CopyRules(sessions=bool(sessions), max_staleness=sources.max_staleness)
    collected_runs: dict[str, list[str]] = {}  # before the length limit
    for run in _store_runs(layout) if RUNS in sources.sources else ():
        split = split_of(run, options)
        kept = 0
        try:
            for pairs in _run_pairs(layout, run):
                written: list[ExportRow] = []
                for prompt_row, state_row in pairs:
                    sid = prompt_row["state_id"]
                    if state_row is None:
                        export.problems.append(f"{run}: prompt {sid} has no state (partial write?)")
                        continue
                    recorded = state_row.pop(DIGEST)
                    key = (
                        bytes.fromhex(recorded)
                        if recorded
                        else state_text_digest(state_row["state"].utf8())
                    )
                    winner = rules.run_copy(sid, key)
                    if winner is not None:
                        export.duplicates[sid] = winner
                        continue
                    kept += 1
                    export.collected += 1
                    row = run_row(
                        prompt_row,
                        state_row,
                        index=gate.index.get(split, 0),
                        split=split,
                        state_id=sid,
                        run=run,
                        assembled=recorded is not None,
                    )
                    row = gate.admit(row)
                    if row is not None:
                        written.append(row)
                        yield row
                if len(written) < len(pairs):
                    # A writer holds rows until it has a row group's worth: a batch must not
                    # stay in memory whole for the few rows it gave (done once the consumer
                    # asks for the next row: the batch lives until then, no longer).
                    compact(row.prompt for row in written)
                    compact(row.state for row in written)
        except _Disagree:
            export.problems.append(
                f"{run}: its prompts were not rendered from its current states (a rebuild in "
                "progress, or one that failed before its prompts): run left out; "
                "materialize it again"
            )
        if kept:
            collected_runs.setdefault(split, []).append(run)
    notes = _duplicate_problems(export.duplicates)
    export.problems.extend(notes)
    export.duplicate_notes.extend(notes)
    collected_sessions: set[str] = set()
    if sessions:
        reader = SessionRows(store, export, gate, rules)
        for session in sessions:
            if (yield from reader.read(session)):
                collected_sessions.add(split_of(session, options))
        export.problems.extend(reader.problems())
    for split in options.splits:
        if export.collected and split not in collected_runs and split not in collected_sessions:
            what = "run or session" if export.with_sessions else "run"
            export.problems.append(f"no {what} fell in split {split!r}: it has no file")
    gate.finish()


def collect_export(
    store: str | os.PathLike[str],
    options: ExportOptions | None = None,
    sources: SourceOptions | None = None,
    selection: Selection | None = None,
) -> ExportSet:
    """Every state of every run in the store, split by run and de-duplicated, held in memory.

    For a small store or a program's own use; the export command and ``training_dataset``
    stream instead (``export.write.stream_export``).
    """
    export = ExportSet(options or ExportOptions())
    rows = export_rows(store, export, sources=sources, selection=selection)
    export.rows = [row.in_python() for row in rows]
    return export


def tally_export(
    store: str | os.PathLike[str],
    options: ExportOptions | None = None,
    sources: SourceOptions | None = None,
) -> ExportSet:
    """What an export of the store would hold (counts, splits, problems), keeping no row."""
    export = ExportSet(options or ExportOptions())
    for _ in export_rows(store, export, sources=sources):
        pass
    return export


def _run_of(state_id: str) -> str:
    return state_id.rsplit("_ckpt", 1)[0]


def _duplicate_problems(duplicates: dict[str, str], shown: int = 5) -> list[str]:
    """One line per run that lost states to an earlier run's identical ones."""
    by_pair: dict[tuple[str, str], list[str]] = {}
    for dropped, kept in duplicates.items():
        by_pair.setdefault((_run_of(dropped), _run_of(kept)), []).append(dropped)
    lines = []
    for (dropped_run, kept_run), ids in by_pair.items():
        listed = ", ".join(ids[:shown]) + (f", … ({len(ids)} in all)" if len(ids) > shown else "")
        lines.append(
            f"{dropped_run}: {plural(len(ids), 'state')} identical to {kept_run}'s left out "
            f"(the earliest run by name keeps {'it' if len(ids) == 1 else 'them'}): {listed}"
        )
    return lines


def empty_train_problem(export: ExportSet) -> str | None:
    """Why ``train`` would be empty although the store has states, or ``None``."""
    if not export.total or export.runs.get("train") or export.sessions.get("train"):
        return None
    elsewhere = ", ".join(f"{s} {len(r)}" for s, r in export.runs.items())
    if export.with_sessions:
        held = ", ".join(f"{s} {len(n)}" for s, n in export.sessions.items())
        return (
            f"no run or session fell in train (runs: {elsewhere}; sessions: {held}): "
            "lower the val/test fractions"
        )
    return f"no run fell in train (runs: {elsewhere}): lower the val/test fractions"
