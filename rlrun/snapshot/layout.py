"""Where a snapshot's files are and how to check them, without torch: `rlrun gc` and `rlrun db
rebuild` read snapshots by the same rules that wrote them.

    s<k>/checkpoints/
      f000000050000/                 a complete snapshot: `snapshot_name(frame)`
        MANIFEST.json                format version, the sha256 of every other file, the logs' segments
        meta.json                    plain JSON: `rlrun.snapshot.meta.SnapshotMeta`
        state.pt                     tensors only: torch.load(weights_only=True)
        logs/<log>.<start>-<end>.npy segments of append-only logs (the replay memory's rows and frames):
                                     items [start, end), each file a hard link shared with the
                                     session's earlier snapshots that hold the same items
        arrays/*.npy                 format 1 only: the replay memory as whole arrays
      .f000000050000.tmp-1a2b3c4d/   being written, or torn by a kill mid-write: `temporary_name`

A snapshot's sha256 is the hash of its MANIFEST.json, which covers every file (shared segments
included: the manifest lists their hashes like any other file's), so the registry's hash verifies
the whole snapshot. A shared segment is an ordinary file with several names: deleting a snapshot
folder deletes its names, and the file system frees a segment with its last name, so no segment
outlives the snapshots that use it and none needs collecting.

Format 2 (this one) adds `logs/` and the manifest's "logs" entry; format 1 snapshots (whole
`arrays/*.npy`, no "logs") are still read.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput
from rlrun.fsutil import bytes_freed_by_removing, folder_size
from rlrun.snapshot.meta import SnapshotMeta

FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)
MANIFEST = "MANIFEST.json"
META = "meta.json"
STATE = "state.pt"
ARRAYS = "arrays"
LOGS = "logs"
_TEMPORARY = ".tmp-"
_CHUNK = 1 << 20


class SnapshotError(BadInput):
    """A snapshot is missing, incomplete, tampered with or of an unknown format."""


# ---------------------------------------------------------------------------------------------
# Names


def snapshot_name(frame: int) -> str:
    return f"f{frame:012d}"


def temporary_name(final_name: str) -> str:
    """A fresh hidden folder name to write the snapshot `final_name` in before renaming it."""
    return f".{final_name}{_TEMPORARY}{uuid.uuid4().hex[:8]}"


def is_temporary(path: Path) -> bool:
    return path.name.startswith(".f") and _TEMPORARY in path.name


def is_snapshot(path: Path) -> bool:
    """Named like a complete snapshot (whether it holds one is `is_complete`)."""
    return path.name.startswith("f")


def is_complete(path: Path) -> bool:
    """Its writing finished: the manifest is written last, just before the rename."""
    return (path / MANIFEST).is_file()


def session_index(snapshot: Path) -> int:
    """The session a snapshot folder belongs to (`s<k>/checkpoints/<snapshot>`)."""
    return int(snapshot.parent.parent.name.removeprefix("s"))


# ---------------------------------------------------------------------------------------------
# Finding and removing folders


def snapshot_folders(run_folder: Path, *, include_temporary: bool = False) -> list[Path]:
    """Every session's snapshot folders in a run folder (and the temporary ones when asked),
    sorted by session, then frame."""
    found = []
    for checkpoints in sorted(run_folder.glob("s*/checkpoints")):
        for entry in sorted(checkpoints.iterdir()):
            if entry.is_dir() and (is_snapshot(entry) or (include_temporary and is_temporary(entry))):
                found.append(entry)
    return found


def sweep_incomplete(directory: Path) -> list[Path]:
    """Delete the temporary folders of snapshots whose writing was cut short (a kill mid-write);
    they were never renamed into place, so nothing refers to them."""
    swept = [p for p in directory.iterdir() if p.is_dir() and is_temporary(p)] if directory.is_dir() else []
    for path in swept:
        remove(path)
    return swept


def sweep_after(directory: Path, frame: int) -> list[Path]:
    """Make way for a session continuing from `frame`: delete the torn snapshots (see
    `sweep_incomplete`) and every complete one of a later frame, which it will write again. Such a
    one may be on disk with no registry row: its process was killed between the rename that
    completed it and the commit that would have recorded it."""
    later = (
        [p for p in directory.iterdir() if (found := frame_of(p.name)) is not None and found > frame]
        if directory.is_dir()
        else []
    )
    for path in later:
        remove(path)
    return sweep_incomplete(directory) + later


def frame_of(name: str) -> int | None:
    """The frame of a complete snapshot's folder name (`snapshot_name`); None for any other name."""
    digits = name.removeprefix("f")
    return int(digits) if name.startswith("f") and len(digits) == 12 and digits.isdigit() else None


def remove(path: Path) -> None:
    """Delete a snapshot (or a torn one) the registry no longer lists."""
    shutil.rmtree(path, ignore_errors=True)


def size_bytes(path: Path) -> int:
    """Bytes of a snapshot's files, shared segments included (what a copy of it takes; 0 when
    it is gone)."""
    return folder_size(path)


def freed_bytes(paths: list[Path]) -> int:
    """Bytes that deleting these snapshots would free: segments that snapshots not among them
    still name stay."""
    return bytes_freed_by_removing(paths)


# ---------------------------------------------------------------------------------------------
# Reading and checking


def json_bytes(document: Any) -> bytes:
    """How meta.json and MANIFEST.json are encoded (sorted keys: the same record, the same bytes)."""
    return json.dumps(document, indent=1, sort_keys=True, allow_nan=True).encode()


def manifest_bytes(hashes: dict[str, str], logs: dict[str, Any] | None = None) -> bytes:
    """MANIFEST.json for files (relative paths) with these sha256 hashes, and the logs' entries
    (`rlrun.snapshot.logs`)."""
    return json_bytes({"format": FORMAT_VERSION, "files": hashes, "logs": logs or {}})


def segment_file(log: str, start: int, end: int) -> str:
    """The relative path of the segment holding items [start, end) of `log`."""
    return f"{LOGS}/{log}.{start:012d}-{end:012d}.npy"


def sha256(path: Path) -> str:
    """The snapshot's hash, as the registry records it: the sha256 of its manifest."""
    return hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest()


def read_meta(path: Path) -> SnapshotMeta:
    """Only the JSON part of a snapshot (its clock, say), unverified: for planning, not restoring."""
    return SnapshotMeta.from_json(json.loads((path / META).read_text()))


def verify(path: Path, expected_sha256: str | None = None, *, deep: bool = True) -> dict[str, Any]:
    """Check a snapshot's integrity; returns its manifest or raises SnapshotError. `deep=False`
    checks only the manifest against the registry's hash, not every file against the manifest."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise SnapshotError(f"checkpoint {path} is missing or incomplete (no {MANIFEST}); use another checkpoint")
    raw = manifest_path.read_bytes()
    if expected_sha256 is not None and hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise SnapshotError(
            f"checkpoint {path} does not match the sha256 the registry recorded (modified or corrupted);"
            " use another checkpoint"
        )
    manifest: dict[str, Any] = json.loads(raw)
    if manifest.get("format") not in READABLE_FORMATS:
        raise SnapshotError(
            f"checkpoint {path} has format {manifest.get('format')!r}; this rlrun reads formats"
            f" {', '.join(map(str, READABLE_FORMATS))}: use a newer rlrun"
        )
    listed = {file for entry in manifest.get("logs", {}).values() for _, _, file in entry["segments"]}
    if not listed <= manifest["files"].keys():
        raise SnapshotError(
            f"checkpoint {path}: its manifest names log segments it does not hash; use another checkpoint"
        )
    for name, digest in manifest["files"].items() if deep else ():
        file = path / name
        if not file.is_file() or hash_file(file) != digest:
            raise SnapshotError(f"checkpoint {path}: {name} is missing or altered; use another checkpoint")
    return manifest


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
