"""What a verl checkpoint keeps of the live dataset, read without verl itself.

verl's ``StatefulDataLoader`` saves its ``state_dict`` in every checkpoint's
``global_step_<n>/data.pt``; :class:`~.verl.LiveRLDataset`'s own state is its
``dataset_state``. Reading it needs torch (the trainer extra), not verl: ``statepool
lineage`` reads it too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .cursor import CursorError

DATA_FILE = "data.pt"
LATEST_FILE = "latest_checkpointed_iteration.txt"


def checkpoint_folder(resume_from: str | os.PathLike[str]) -> Path | None:
    """The ``global_step_<n>`` folder ``resume_from`` names: itself, or the latest one of the
    trainer's ``default_local_dir``; ``None`` when there is no checkpoint there yet."""
    folder = Path(resume_from)
    latest = folder / LATEST_FILE
    if latest.is_file():
        return folder / f"global_step_{latest.read_text().strip()}"
    if (folder / DATA_FILE).is_file():
        return folder
    return None


def dataset_state(resume_from: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The live dataset's saved state in a verl checkpoint: ``resume_from`` is a
    ``global_step_<n>`` folder, or the trainer's ``default_local_dir`` (its latest one);
    ``None`` when there is no checkpoint yet. Read as tensors and plain values only
    (``torch.load(weights_only=True)``: nothing unpickled)."""
    import torch

    folder = checkpoint_folder(resume_from)
    if folder is None:
        return None
    state = torch.load(folder / DATA_FILE, weights_only=True).get("dataset_state")
    if state is None:
        raise CursorError(f"{folder / DATA_FILE}: no live dataset state in it")
    return state
