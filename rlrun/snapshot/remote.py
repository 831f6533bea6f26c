"""Snapshots in a home kept in object storage (`rlrun.storage`): the same format, the same guarantees.

A snapshot is written into the home's working copy exactly as on disk (`rlrun.snapshot.prepare`),
then uploaded before the registry hears of it:

    <run>/s<k>/checkpoints/f000000050000/   meta.json, state.pt, arrays/*.npy, then MANIFEST.json
    <run>/s<k>/segments/<log>.<start>-<end>.<sha256[:16]>.npy
                                            the replay memory's segments, each uploaded once and
                                            shared by every snapshot whose manifest lists it

- Objects first, manifest last: a snapshot prefix without MANIFEST.json (a kill -9 mid-upload) is
  torn, never read (`materialize` finds no manifest), and swept (`sweep_after`, `rlrun gc`). The
  registry row, written after the manifest, is the commit, as on disk.
- Segments are shared by reference, as hard links share them on disk: the manifest (the very bytes
  the registry's hash covers) lists `logs/<log>.<start>-<end>.npy` with its sha256, and that name
  with that hash *is* the segment object's key, so no second list can drift from it. A segment is
  deleted when no complete snapshot of its session lists it any more (`remove` collects them), so
  retention, `gc` and `rm` neither orphan one nor break a snapshot that still needs it. The hash in
  the key makes every segment object immutable: a session rewound and trained differently writes
  new objects, never over old ones.
- Reading downloads the snapshot into the working copy (`materialize`), then verifies every file
  against the manifest and the manifest against the registry's hash, as on disk.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

from rlrun import storage, testhooks
from rlrun.snapshot.layout import LOGS, MANIFEST, META, READABLE_FORMATS, frame_of, sha256, temporary_name

SEGMENTS = "segments"


def _segments_of(manifest: dict[str, Any]) -> set[str]:
    return {file for entry in manifest.get("logs", {}).values() for _, _, file in entry["segments"]}


def _segment_key(mirror: storage.Mirror, checkpoints: Path, file: str, digest: str) -> str:
    stem = file.removeprefix(f"{LOGS}/").removesuffix(".npy")
    return mirror.key(checkpoints.parent / SEGMENTS / f"{stem}.{digest[:16]}.npy")


def object_keys(mirror: storage.Mirror, snapshot: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """Each file of a snapshot (MANIFEST.json aside) and the object holding it."""
    segments = _segments_of(manifest)
    return {
        name: _segment_key(mirror, snapshot.parent, name, digest) if name in segments else mirror.key(snapshot / name)
        for name, digest in manifest["files"].items()
    }


def upload(folder: Path, destination: Path) -> None:
    """Upload the snapshot written in `folder` (its temporary folder, or itself) as `destination`,
    its manifest last. Nothing for a snapshot in a local home."""
    mirror = storage.mirror_of(destination)
    if mirror is None:
        return
    manifest = json.loads((folder / MANIFEST).read_bytes())
    mirror.delete_tree(destination)  # what a torn attempt at this same snapshot left
    present = set(mirror.keys(mirror.key(destination.parent.parent / SEGMENTS)))
    keys = object_keys(mirror, destination, manifest)
    pending = [(folder / name, key) for name, key in keys.items() if key not in present]
    mirror.put_many(pending)
    testhooks.crash_point("snapshot-half-uploaded")
    mirror.put(folder / MANIFEST, mirror.key(destination / MANIFEST))


def materialize(path: Path, expected_sha256: str | None = None) -> None:
    """Make the snapshot at `path` whole in the working copy of its home, downloading it (or
    replacing a stale copy: the registry's hash says which) when needed. A snapshot with no
    manifest in the store is left missing: reading it then fails as a missing snapshot does."""
    mirror = storage.mirror_of(path)
    if mirror is None:
        return
    if (path / MANIFEST).is_file() and (expected_sha256 is None or sha256(path) == expected_sha256):
        return
    raw = mirror.get_bytes(mirror.key(path / MANIFEST))
    if raw is None:
        return
    manifest = json.loads(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / temporary_name(path.name)
    try:
        mirror.get_many([(key, temporary / name) for name, key in object_keys(mirror, path, manifest).items()])
        (temporary / MANIFEST).write_bytes(raw)
        shutil.rmtree(path, ignore_errors=True)
        temporary.rename(path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def read_bytes(path: Path, name: str) -> bytes | None:
    """One small file of a snapshot (meta.json) from the store, or None in a local home."""
    mirror = storage.mirror_of(path)
    return None if mirror is None else mirror.get_bytes(mirror.key(path / name))


def remove(path: Path) -> None:
    """Delete a snapshot's objects, then the segments no complete snapshot of its session lists."""
    mirror = storage.mirror_of(path)
    if mirror is not None:
        mirror.delete_tree(path)
        collect_segments(mirror, path.parent)


def snapshots(directory: Path) -> dict[str, bool]:
    """The snapshots a session's checkpoints folder holds in the store: name -> complete (its
    manifest uploaded). Empty in a local home."""
    mirror = storage.mirror_of(directory)
    if mirror is None:
        return {}
    prefix = mirror.key(directory) + "/"
    found: dict[str, bool] = {}
    for key in mirror.keys(mirror.key(directory)):
        name, _, rest = key.removeprefix(prefix).partition("/")
        found[name] = found.get(name, False) or rest == MANIFEST
    return found


def sweep_after(directory: Path, frame: int) -> list[str]:
    """`layout.sweep_after` in the store: delete torn snapshots and complete ones after `frame`."""
    mirror = storage.mirror_of(directory)
    if mirror is None:
        return []
    doomed = [
        name
        for name, complete in snapshots(directory).items()
        if not complete or (found := frame_of(name)) is None or found > frame
    ]
    for name in doomed:
        mirror.delete_tree(directory / name)
    if doomed:
        collect_segments(mirror, directory)
    return doomed


def collect_segments(mirror: storage.Mirror, directory: Path) -> list[str]:
    """Delete the segment objects of the session (`directory` its checkpoints folder) that no
    complete snapshot of it lists. Only its one writer calls this while the session runs (after
    its upload), or `rlrun gc`/`rm` while it does not."""
    live: set[str] = set()
    for name, complete in snapshots(directory).items():
        raw = mirror.get_bytes(mirror.key(directory / name / MANIFEST)) if complete else None
        if raw is not None:
            live |= set(object_keys(mirror, directory / name, json.loads(raw)).values())
    stale = [key for key in mirror.keys(mirror.key(directory.parent / SEGMENTS)) if key not in live]
    mirror.delete(stale)
    return stale


def run_snapshots(run_folder: Path) -> dict[Path, bool]:
    """Every snapshot the store holds under a run folder, as its path in the working copy ->
    complete (its manifest uploaded). Empty in a local home."""
    found: dict[Path, bool] = {}
    for parts in _run_keys(run_folder):
        if len(parts) >= 4 and parts[1] == "checkpoints":
            path = run_folder.joinpath(*parts[:3])
            found[path] = found.get(path, False) or parts[3:] == [MANIFEST]
    return found


def run_checkpoint_folders(run_folder: Path) -> list[Path]:
    """The sessions' checkpoints folders of a run that have snapshots or segments in the store."""
    return sorted(
        {
            run_folder / parts[0] / "checkpoints"
            for parts in _run_keys(run_folder)
            if len(parts) >= 3 and parts[1] in ("checkpoints", SEGMENTS)
        }
    )


def _run_keys(run_folder: Path) -> list[list[str]]:
    mirror = storage.mirror_of(run_folder)
    if mirror is None:
        return []
    prefix = mirror.key(run_folder) + "/"
    return [key.removeprefix(prefix).split("/") for key in mirror.keys(mirror.key(run_folder))]


class Stored(NamedTuple):
    """A complete snapshot in the store, read without its large files (`rlrun db rebuild`)."""

    path: Path  # in the working copy
    sha256: str  # of its manifest, as the registry records it
    meta: dict[str, Any]  # meta.json, checked against the manifest
    size_bytes: int  # its objects', shared segments included (what a copy of it takes)
    created_at: float  # when its manifest, the last object, was written (the store's clock)


def stored_snapshots(run_folder: Path) -> list[Stored]:
    """Every complete snapshot the store holds under a run folder, sorted by session then frame,
    each checked as far as can be without downloading its state: a manifest of a readable format,
    meta.json matching the manifest's hash, every object it lists present. A snapshot that fails
    is ValueError naming it (reading it later would fail the same way). Empty in a local home."""
    mirror = storage.mirror_of(run_folder)
    if mirror is None:
        return []
    sizes = mirror.sizes(mirror.key(run_folder))
    found = []
    for path, complete in sorted(run_snapshots(run_folder).items()):
        if not complete:
            continue  # torn by a kill mid-upload: never a checkpoint
        where = path.relative_to(run_folder.parent)
        raw = mirror.get_bytes(mirror.key(path / MANIFEST))
        if raw is None:
            continue  # deleted since the listing (`rlrun gc` elsewhere)
        manifest = json.loads(raw)
        if manifest.get("format") not in READABLE_FORMATS:
            raise ValueError(f"{where} has snapshot format {manifest.get('format')!r}; use a newer rlrun")
        keys = object_keys(mirror, path, manifest)
        missing = sorted(name for name, key in keys.items() if key not in sizes)
        if missing:
            raise ValueError(f"{where}: its objects {', '.join(missing)} are not in the store")
        meta = mirror.get_bytes(keys[META])
        if meta is None or hashlib.sha256(meta).hexdigest() != manifest["files"][META]:
            raise ValueError(f"{where}: {META} does not match its manifest (altered)")
        manifest_key = mirror.key(path / MANIFEST)
        found.append(
            Stored(
                path,
                hashlib.sha256(raw).hexdigest(),
                json.loads(meta),
                sum(sizes[key] for key in keys.values()) + len(raw),
                mirror.modified(manifest_key),
            )
        )
    return found
