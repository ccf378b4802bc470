"""``statepool lineage CHECKPOINT_DIR``: what a trainer checkpoint trained on.

The states drawn, where each comes from and the rewards recorded for it; files only, never
Dagster."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..core import Settings, plural


def add_parser(sub: Any) -> None:
    """Register ``statepool lineage`` on the main parser's sub-commands."""
    help_text = "the states a trainer checkpoint trained on, each with its source and its rewards"
    p = sub.add_parser("lineage", help=help_text, description=help_text)
    p.add_argument(
        "checkpoint",
        metavar="CHECKPOINT_DIR",
        help="a TRL checkpoint-<step> folder (with statepool_cursor.json) or a verl "
        "global_step_<n> folder (or the folder naming its latest one)",
    )
    p.add_argument(
        "--store",
        default=None,
        help="store root (default the store the checkpoint names, else STATEPOOL_STORE_DIR)",
    )
    p.add_argument(
        "--sessions", default=None, help="sessions root (default STATEPOOL_SESSIONS_DIR)"
    )
    p.add_argument(
        "--feedback",
        default=None,
        help="the trainer's feedback folder (default STATEPOOL_FEEDBACK_DIR, else "
        "<store>/feedback)",
    )
    p.add_argument("--json", action="store_true", help="print the lineage as JSON")
    p.set_defaults(func=cmd_lineage)


def cmd_lineage(args: argparse.Namespace) -> int:
    from ..core import StatepoolError, as_path
    from ..core.feedback import feedback_folder
    from ..trainers.lineage import lineage, read_checkpoint

    checkpoint = read_checkpoint(args.checkpoint)
    store = args.store or str(checkpoint.state["store"])
    settings = Settings.from_env(store_dir=store, sessions_dir=args.sessions)
    path = as_path(store)
    if not path.exists():
        name = "--store" if args.store else f"{checkpoint.folder}: its store"
        raise StatepoolError(f"{name}: store {path} does not exist")
    if not path.is_dir():
        name = "--store" if args.store else f"{checkpoint.folder}: its store"
        raise StatepoolError(f"{name}: {path} is a file, not a store folder")
    feedback = args.feedback or feedback_folder(settings)
    found = lineage(checkpoint, store, feedback, settings.sessions_dir)
    if args.json:
        print(json.dumps(found.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(lineage_text(found))
    return 0


def lineage_text(found) -> str:
    """The lineage as a few lines of evidence and a table, one state a row."""
    checkpoint, read = found.checkpoint, found.feedback
    step = "step unknown" if checkpoint.step is None else f"step {checkpoint.step}"
    trainer = {"trl": "TRL", "verl": "verl"}[checkpoint.trainer]
    draws = "" if found.draws is None else f" in {plural(found.draws, 'draw')}"
    lines = [
        f"{checkpoint.folder}: {trainer}, {step}, pool version {found.version} "
        f"({plural(found.version_states, 'state')}) of the store {found.store}",
        f"drawn: {plural(len(found.states), 'state')}{draws}, from {found.drawn_from}",
        f"rewards: {plural(read.kept, 'record')} counted, from {found.rewards_from}",
    ]
    if read.left_out or read.bad_lines:
        parts = [f"{n} {why}" for why, n in sorted(read.left_out.items())]
        parts += [f"{read.bad_lines} not records"] if read.bad_lines else []
        lines.append(f"left out: {', '.join(parts)} (of {plural(read.records, 'record')})")
    if checkpoint.trainer == "verl" and not read.kept:
        lines.append(
            "no verl record with a step: verl's compute_score records none; import the "
            "rollout dumps (statepool feedback --from-verl-dump DIR) to know the states drawn"
        )
    if not found.states:
        return "\n".join(lines)
    rows = [("state", "source", "rewards", "mean", "steps", "note")]
    for s in found.states:
        r = s.rewards
        steps = "" if r.first_step is None else f"{r.first_step}-{r.last_step}"
        if r.first_step == r.last_step and r.first_step is not None:
            steps = str(r.first_step)
        note = []
        if s.source is None:
            note.append("not served now")
        if s.changed_since:
            note.append("row changed since")
        if s.position is None:
            note.append("not in the version")
        source = "-" if s.source is None else s.source.describe()
        mean = f"{r.mean:.3f}" if r.count else "-"
        rows.append((s.state_id, source, str(r.count), mean, steps, ", ".join(note)))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines.append("")
    for row in rows:
        cells = [
            cell.rjust(w) if k in (2, 3) else cell.ljust(w)
            for k, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
