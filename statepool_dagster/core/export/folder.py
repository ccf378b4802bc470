"""An export folder written file by file as rows stream in, then swapped in whole.

On a local disk the files go to a hidden sibling of the target, which then takes its
place in one atomic exchange (as ``store.atomic.replace_dir_atomic`` does for folders
given whole). For an fsspec target they go to a local temporary folder first; once the
export is complete each file is copied up in one put, then the manifest naming them, then
the files it no longer names are deleted. Nothing is held in memory but a copy buffer.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ..locations import AnyPath, is_local
from ..store.atomic import exchange, publish_manifest, temp_sibling


class StagedFolder:
    """A folder whose files are written into ``path`` and published by ``commit()``."""

    def __init__(self, final: AnyPath):
        self.final = final
        self.local = is_local(final)
        if self.local:
            final.parent.mkdir(parents=True, exist_ok=True)
            self.path = temp_sibling(final)
            self.path.mkdir()
        else:
            self.path = Path(tempfile.mkdtemp(prefix="statepool-export-"))
        self.done = False

    def commit(self) -> int:
        """Publish the folder; returns the number of files in it."""
        count = sum(1 for _ in self.path.iterdir())
        if self.local:
            self._swap()
        else:
            self._upload()
        self.done = True
        return count

    def keep(self, name: str) -> bool:
        """Put the file ``name`` of the folder this one replaces in unchanged (a hard link: a
        local folder and its staged sibling share a disk); whether it could be."""
        if not self.local:
            return False
        try:
            os.link(self.final / name, self.path / name)
        except OSError:
            return False
        return True

    def discard(self) -> None:
        """Remove what was staged (after a commit: the old folder, or nothing)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def _swap(self) -> None:
        final = self.final
        if not final.exists():
            os.replace(self.path, final)
        elif not exchange(self.path, final):
            # No atomic swap on this system: move the old folder aside (a brief gap, never torn).
            old = temp_sibling(final)
            os.replace(final, old)
            os.replace(self.path, final)
            self.path = old
        # After a swap or the fallback, ``self.path`` holds the old folder.

    def _upload(self) -> None:
        final = self.final
        with contextlib.suppress(FileExistsError):  # an object store's "folder" is a prefix
            final.mkdir(parents=True, exist_ok=True)
        written: dict[str, str] = {}
        for file in sorted(self.path.iterdir()):
            digest = hashlib.blake2b(digest_size=16)
            with open(file, "rb") as source, (final / file.name).open("wb") as target:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    target.write(chunk)
            written[file.name] = digest.hexdigest()
        publish_manifest(final, written)
