"""Each run's report figures kept beside the report, so a report re-reads only changed runs.

Counting a run's figures reads its four tables; drawing them is cheap. So a run's counts
(``RunNumbers`` without its split and ignored files, and its prompt lengths) are kept in
``store/report/.figures/<run>.json`` with a stamp of the files they were read from: each
table part's and the rejects file's inode, size and modification time. A report takes the
kept figures of a run whose stamp still matches and reads the others again (a sync counts
nothing: the first report after it does). A store that is not a local folder keeps nothing:
every report reads it all.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import os
from pathlib import Path

from ..locations import AnyPath
from ..names import EPISODES, PROMPTS, SNAPSHOTS, STATES
from ..store.atomic import write_bytes_atomic
from ..store.layout import StoreLayout
from .numbers import RunNumbers, prompt_chars, run_numbers
from .paths import REPORT_FOLDER, RUN_PAGE_KEYS

FIGURES_FOLDER = ".figures"
# Part of every stamp: a change to what RunNumbers holds or how it is counted bumps it.
FIGURES_VERSION = "1"


def figures_folder(layout: StoreLayout) -> AnyPath:
    return layout.root / REPORT_FOLDER / FIGURES_FOLDER


def folders_stamp(version: str, paths: list[AnyPath]) -> str:
    """A digest of ``version`` and the name, inode, size and mtime of every file in ``paths``
    (a path that is a file counts as itself, a missing one as nothing)."""
    digest = hashlib.blake2b(version.encode(), digest_size=16)
    for path in paths:
        digest.update(f"\0{path}".encode())
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            entries = [path]
        for entry in entries:
            st = os.stat(entry)
            name = getattr(entry, "name", "")
            digest.update(f"{name}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns};".encode())
    return digest.hexdigest()


def files_stamp(layout: StoreLayout, run: str) -> str | None:
    """A digest of what the run's figures are read from; None when it cannot be taken."""
    if not layout.local:
        return None
    paths = [layout.table(asset, run) for asset in (EPISODES, SNAPSHOTS, STATES, PROMPTS)]
    return folders_stamp(FIGURES_VERSION, [*paths, layout.rejects(run)])


def _to_json(stamp: str, figures: RunNumbers, chars: list[int]) -> bytes:
    return json.dumps(
        {
            "stamp": stamp,
            "run": figures.run,
            "accuracy": list(figures.accuracy.items()),
            "episodes": list(figures.episodes.items()),
            "cards": list(figures.cards.items()),
            "ops": list(figures.ops.items()),
            "states": figures.states,
            "rejects": figures.rejects,
            "prompt_chars": chars,
        }
    ).encode()


def _from_json(data: dict) -> tuple[RunNumbers, list[int]]:
    figures = RunNumbers(
        data["run"],
        accuracy={int(k): v for k, v in data["accuracy"]},
        episodes={int(k): v for k, v in data["episodes"]},
        cards={int(k): v for k, v in data["cards"]},
        ops={int(k): v for k, v in data["ops"]},
        states=data["states"],
        rejects=data["rejects"],
    )
    return figures, data["prompt_chars"]


def _kept(path: AnyPath, stamp: str) -> tuple[RunNumbers, list[int]] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("stamp") != stamp:
        return None
    try:
        return _from_json(data)
    except (KeyError, TypeError, ValueError):
        return None


def counted_run(layout: StoreLayout, run: str) -> tuple[RunNumbers, list[int], str | None]:
    """The run's figures (no split, no ignored files) and prompt lengths, kept or read, and
    the stamp of the files they count (``None``: not kept, as for a store not on this disk)."""
    stamp = files_stamp(layout, run)
    path = figures_folder(layout) / f"{run}.json"
    if stamp is not None:
        kept = _kept(path, stamp)
        if kept is not None:
            return (*kept, stamp)
    figures, chars = run_numbers(layout, run, None), prompt_chars(layout, run)
    # Kept only if nothing changed while it was read: else the next report reads it again.
    if stamp is not None and files_stamp(layout, run) == stamp:
        with contextlib.suppress(OSError):
            write_bytes_atomic(path, _to_json(stamp, figures, chars))
            return figures, chars, stamp
    return figures, chars, None


def page_key(stamp: str | None, figures: RunNumbers, problems: list[str]) -> str | None:
    """What a run's page is drawn from, as a digest: the counted files' stamp, its split,
    ignored files and problems (``None`` without a stamp: drawn every time)."""
    if stamp is None:
        return None
    drawing = code_digest("report.run_page", "report.svg", "words")
    drawn = [drawing, stamp, figures.split, sorted(figures.ignored.items()), problems]
    return hashlib.blake2b(json.dumps(drawn).encode(), digest_size=16).hexdigest()


@functools.cache
def code_digest(*modules: str) -> str:
    """A digest of the source of ``modules`` (named under ``statepool_dagster.core``), the
    code that draws a kept page: a page drawn by other code is drawn again."""
    digest = hashlib.blake2b(digest_size=16)
    for name in modules:
        module = importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{name}")
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def kept_page_keys(folder: AnyPath) -> dict[str, str]:
    """``{run: page_key}`` of the run pages in ``folder`` (empty when unknown)."""
    try:
        keys = json.loads((folder / RUN_PAGE_KEYS).read_bytes())
    except (OSError, ValueError):
        return {}
    return keys if isinstance(keys, dict) else {}


def keep_page_keys(folder: AnyPath, keys: dict[str, str]) -> None:
    """Keep ``{run: page_key}`` beside the pages in ``folder`` (staged: swapped in with them)."""
    (folder / RUN_PAGE_KEYS).write_bytes(json.dumps(keys).encode())


def prune_figures(layout: StoreLayout, runs: list[str]) -> None:
    """Forget the kept figures of runs no longer in the store."""
    folder = figures_folder(layout)
    if not layout.local or not folder.is_dir():
        return
    keep = {f"{run}.json" for run in runs}
    for path in folder.iterdir():
        if path.suffix == ".json" and path.name not in keep:
            with contextlib.suppress(OSError):
                path.unlink()
