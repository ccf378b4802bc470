"""What changed in a store or a sessions folder, from one listing: index stamps, folder names.

A stamp is ``core.locations.Stamp``: locally from ``os.stat``, through fsspec from
one listing's entries, the listing cache dropped first so that an object store's new files
are seen. ``None`` means the place could not be read (gone or unreachable): the pool then
keeps what it has.
"""

from __future__ import annotations

import os

from ..core import (
    AnyPath,
    Stamp,
    as_path,
    entry_name,
    forget_listing,
    forget_tree,
    is_local,
    storage_errors,
)
from ..core.names import TABLE_INDEX


def location(where: str | os.PathLike[str], storage_options: dict | None) -> AnyPath:
    """A store or sessions folder as a path (a URL with fsspec's options as a ``UPath``)."""
    text = os.fspath(where) if not hasattr(where, "protocol") else where
    if storage_options and isinstance(text, str) and "://" in text:
        from upath import UPath

        return UPath(text, **storage_options)
    return as_path(text)


def reachable(root: AnyPath) -> bool:
    """Whether ``root`` is there to be read (a store or sessions folder gone says no)."""
    try:
        if is_local(root):
            return os.path.isdir(root) and os.access(root, os.R_OK | os.X_OK)
        forget_listing(root)
        return root.fs.isdir(root.path)
    except storage_errors():
        return False


def index_stamps(folder: AnyPath, index: str = TABLE_INDEX) -> dict[str, Stamp] | None:
    """``{subfolder: stamp of its index file}`` for each subfolder of ``folder`` holding one.

    A subfolder without an index yet (a first build under way) is left out.
    """
    found: dict[str, Stamp] = {}
    if is_local(folder):
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return found
        except OSError:
            return None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                st = os.stat(os.path.join(entry.path, index))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                return None
            found[entry.name] = Stamp.of_stat(st)
        return found
    forget_tree(folder)  # the index files under it too, whose ETags a read then checks
    try:
        infos = folder.fs.find(folder.path, detail=True)  # one listing (no delimiter) on S3
    except FileNotFoundError:
        return found
    except storage_errors():
        return None
    base = folder.path.rstrip("/")
    for path, info in infos.items():
        rest = path.rstrip("/")[len(base) + 1 :].split("/")
        if len(rest) == 2 and rest[1] == index and not rest[0].startswith("."):
            found[rest[0]] = Stamp.of_info(info)
    return found


def subfolders(folder: AnyPath) -> list[str] | None:
    """The names of ``folder``'s subfolders (dot names left out); ``None`` if unreadable."""
    try:
        if is_local(folder):
            with os.scandir(folder) as entries:
                return [e.name for e in entries if e.is_dir() and not e.name.startswith(".")]
        forget_listing(folder)
        infos = folder.fs.ls(folder.path, detail=True)
        names = [entry_name(i) for i in infos if i.get("type") == "directory"]
        return [n for n in names if not n.startswith(".")]
    except FileNotFoundError:
        return []
    except storage_errors():
        return None
