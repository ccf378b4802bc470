"""``skill_snapshots``: one part per snapshot file; a file with the same stamp is not read."""

from __future__ import annotations

from ..config import Settings
from ..errors import BadRecordError
from ..locations import file_stamp
from ..names import IGNORED_FILES, SNAPSHOTS, SNAPSHOTS_DIR, RejectSource
from ..rejects import UNSTORABLE, Reject
from ..runs.files import Fingerprint
from ..runs.json_read import storable_form
from ..runs.opening import FolderGate, run_notes
from ..runs.snapshots import list_snapshots, read_snapshot
from ..store.part_files import part_name
from ..store.preview import recent
from ..store.rows import snapshot_row
from .job import TABLE_FORMAT, OpenTables, StageReport, digest, digest_pieces, run_folder
from .runner import Stage, StagePass, preview

STAGE = Stage(
    SNAPSHOTS, RejectSource.SNAPSHOTS, preview(["version", "file", "declared_version", "n_cards"])
)


def build_snapshots(
    run: str, settings: Settings, tables: OpenTables, fingerprint: Fingerprint
) -> StageReport:
    """``skill_snapshots``: one row per snapshot, numeric order, embeddings stripped.

    ``fingerprint``: the run's files as the step found them before any stage read them.
    """
    stamps = fingerprint.stamps
    run_dir = run_folder(settings, run)
    gate = FolderGate(run_dir)
    listing = list_snapshots(run_dir / SNAPSHOTS_DIR)
    stage = StagePass(STAGE, run, tables)
    for version, file_name in listing.named:
        display = f"{run}/{SNAPSHOTS_DIR}/{file_name}"
        name = part_name(version)
        # As the fingerprint saw it (a file changed since is read again next time).
        stamp = stamps.get(f"{SNAPSHOTS_DIR}/{file_name}")
        snapshot_file = None
        if stamp is None:
            snapshot_file = listing.file(version, file_name)
            stamp = str(file_stamp(snapshot_file.path) or "")
        key = digest(TABLE_FORMAT, display, stamp)
        if stamp and stage.reuse(name, key):
            continue
        snapshot_file = snapshot_file or listing.file(version, file_name)
        read = read_snapshot(snapshot_file, display, strict=settings.strict, gate=gate)
        if isinstance(read, Reject):
            stage.rejects.append(read)
            continue
        row = snapshot_row(read, stamp if stamp else "")
        library = storable_form(row.library)
        if library is None:
            reject = Reject(file=display, line=None, error=UNSTORABLE, raw=None)
            if settings.strict:
                raise BadRecordError(reject.describe()) from None
            stage.rejects.append(reject)
            continue
        info = {
            "version": row.version,
            "file": row.file,
            "declared": row.declared_version,
            "n_cards": row.n_cards,
            # what states are keyed by (the same digest of the text or of its UTF-8)
            "library": digest(library) if isinstance(library, str) else digest_pieces([(library,)]),
            "rows": 1,
        }
        if read.declared_version is not None and row.declared_version is None:
            kind = type(read.declared_version).__name__
            info["note"] = (
                f"{display}: version is not a 64-bit integer ({kind}); its column is empty"
            )
        key = key if stamp else digest(key, row.library)
        stage.write_row(name, row._replace(library=library), key, info)
    stage.finish(fingerprint.digest)
    infos = stage.infos()
    # declared versions kept in the library that the column cannot hold, reused parts too
    notes = [i["note"] for i in infos if "note" in i]
    return stage.report(
        {"snapshots": len(infos), "rejects": len(stage.rejects), "reused": stage.reused},
        json={
            "versions": [i["version"] for i in recent(infos)],
            "cards_by_version": {str(i["version"]): i["n_cards"] for i in recent(infos)},
            IGNORED_FILES: dict(listing.ignored),
        },
        notes=run_notes(run_dir) + notes,
    )
