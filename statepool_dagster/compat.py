"""Drop-in for the original ``statepool`` module: change only the import line.

from statepool_dagster.compat import CheckpointState, collect_from_run, load_state_pool
"""

from __future__ import annotations

import os
from pathlib import Path

from .core.config import Settings
from .core.locations import as_path
from .core.names import parse_run_state_id
from .core.prompts.render import build_curator_prompt as _render
from .core.prompts.spec import PromptSpec
from .core.runs.files import natural_key
from .core.stages.collect import read_run
from .core.states.models import CheckpointState
from .core.store.atomic import read_dir_files, write_bytes_atomic

__all__ = ["CheckpointState", "build_curator_prompt", "collect_from_run", "load_state_pool"]


def collect_from_run(run_dir: str | os.PathLike[str], out_dir: str, dataset: str = "ovo") -> int:
    """Write one ``<state_id>.json`` per checkpoint state of ``run_dir``; return how many."""
    read = read_run(Path(run_dir), dataset=dataset)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for joined in read.states:
        write_bytes_atomic(out / f"{joined.state.state_id}.json", joined.text.encode("utf-8"))
    return len(read.states)


def build_curator_prompt(state: CheckpointState, cfg: PromptSpec | None = None) -> str:
    """The curator prompt; ``cfg`` is a :class:`PromptSpec`, else the ``STATEPOOL_*`` settings."""
    return _render(state, cfg if isinstance(cfg, PromptSpec) else Settings.from_env().prompt_spec())


def state_file_order(name: str) -> tuple:
    """Run (natural order), then numeric checkpoint; other names after, by name."""
    parsed = parse_run_state_id(name.removesuffix(".json")) if name.endswith(".json") else None
    if parsed:
        return (0, natural_key(parsed[0]), parsed[1], name)
    return (1, [], 0, name)


def load_state_pool(pool_dir: str | os.PathLike[str]) -> list[CheckpointState]:
    """Every state in ``pool_dir``, in run then checkpoint order; temp files are skipped.

    The original's signature, one folder; ``statepool_dagster.load_state_pool`` reads a
    whole store (every run's folder of its ``state_pool/``) with this one.
    ``pool_dir`` may be an fsspec URL: a folder the store wrote there is read by its manifest.
    """
    folder = as_path(pool_dir)
    if not folder.is_dir():
        return []  # as the original's glob: no folder, no states
    files = read_dir_files(folder, lambda name: name.endswith(".json"))
    return [CheckpointState.from_json(files[name]) for name in sorted(files, key=state_file_order)]
