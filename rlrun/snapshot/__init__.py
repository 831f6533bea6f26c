"""The snapshot format: the one package that writes and reads session snapshots.

`layout` says where the files are and checks them (torch-free, for `rlrun gc` and `rlrun db
rebuild`); `meta` types what meta.json holds; `logs` writes large append-only data (the replay
memory) as segments shared between a session's snapshots; this module writes a snapshot and reads
it back, and imports torch and NumPy only inside `write` and `read`, where tensors and arrays are
handled.

A snapshot is written into a hidden temporary directory, every file and the directory fsync'd,
then renamed into place; only then is it reported to the registry. Nothing read here is ever
unpickled.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun import storage, testhooks
from rlrun.fsutil import fsync_path, write_synced
from rlrun.snapshot import layout, remote
from rlrun.snapshot.layout import (
    ARRAYS,
    LOGS,
    MANIFEST,
    META,
    STATE,
    SnapshotError,
    hash_file,
    json_bytes,
    manifest_bytes,
    size_bytes,
    snapshot_name,
    sweep_incomplete,
    temporary_name,
)
from rlrun.snapshot.logs import Log, StoredLog, stored_logs, write_logs
from rlrun.snapshot.meta import Best, RandomStates, SnapshotMeta

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Best",
    "Log",
    "Prepared",
    "RandomStates",
    "Snapshot",
    "SnapshotError",
    "SnapshotMeta",
    "StoredLog",
    "Written",
    "prepare",
    "read",
    "read_meta",
    "remove",
    "snapshot_name",
    "sweep_after",
    "sweep_incomplete",
    "verify",
    "write",
]


@dataclass
class Snapshot:
    meta: SnapshotMeta
    tensors: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    """Plain arrays, one .npy each (format 1 kept the replay memory here; read back memory-mapped)."""
    logs: dict[str, Any] = field(default_factory=dict)
    """Append-only logs: `Log`s to write, `StoredLog`s when read (`rlrun.snapshot.logs`)."""


@dataclass(frozen=True)
class Written:
    path: Path
    sha256: str
    size_bytes: int


def write(destination: Path, snapshot: Snapshot, *, previous: Path | None = None) -> Written:
    """Write `snapshot` atomically at `destination` (which must not exist yet). Its logs' items
    that `previous` (the snapshot the writer's state descends from) holds are linked from there,
    not written again."""
    prepared = prepare(destination, snapshot, previous=previous)
    try:
        prepared.upload()
        return prepared.publish()
    except BaseException:
        prepared.discard()
        raise


@dataclass(frozen=True)
class Prepared:
    """A snapshot written in full to its temporary folder, not yet in place. `publish` renames it
    into place; a caller that must fence the rename (a session on a cluster, under its lease) runs
    `publish` inside its fenced registry transaction, and `discard`s it when the fence refuses."""

    temporary: Path
    destination: Path
    sha256: str
    size_bytes: int

    @property
    def in_object_storage(self) -> bool:
        """Whether `upload` has work to do (the home is in object storage)."""
        return storage.mirror_of(self.destination) is not None

    def upload(self) -> None:
        """In a home kept in object storage, upload the snapshot (objects, then its manifest) before
        it is published; nothing on disk. Reads only the temporary folder, so it may run in a
        background thread while training goes on (`rlrun.session.checkpoints`)."""
        remote.upload(self.temporary, self.destination)

    def publish(self) -> Written:
        """Put the folder in place. Idempotent, as a retried registry write needs (`add_checkpoint`):
        a second call finds it renamed already (`prepare` refused an existing destination)."""
        if self.temporary.exists() or not self.destination.exists():
            os.rename(self.temporary, self.destination)
            fsync_path(self.destination.parent)
            testhooks.crash_point("snapshot-renamed")
        return Written(self.destination, self.sha256, self.size_bytes)

    def discard(self) -> None:
        layout.remove(self.temporary)

    def with_meta(self, meta: SnapshotMeta) -> Prepared:
        """The same snapshot, still unpublished, with another meta.json: for a writer that learns
        only after writing it what its meta says (a session whose evaluation at this frame was
        still running: which evaluations, best score and kind it holds)."""
        import json

        manifest = json.loads((self.temporary / MANIFEST).read_bytes())
        files = {**manifest["files"], META: write_synced(self.temporary / META, json_bytes(meta.to_json()))}
        raw = manifest_bytes(files, manifest["logs"])
        write_synced(self.temporary / MANIFEST, raw)
        fsync_path(self.temporary)
        return Prepared(self.temporary, self.destination, hashlib.sha256(raw).hexdigest(), size_bytes(self.temporary))


def prepare(destination: Path, snapshot: Snapshot, *, previous: Path | None = None) -> Prepared:
    """Write every file of `snapshot` into a temporary folder beside `destination` (which must not
    exist yet), fsync'd, linking the log segments `previous` holds; `Prepared.upload` (a home in
    object storage) and `Prepared.publish` complete it."""
    import torch

    if destination.exists():
        raise FileExistsError(f"snapshot {destination} already exists")
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.parent / temporary_name(destination.name)
    temporary.mkdir()
    try:
        hashes = {META: write_synced(temporary / META, json_bytes(snapshot.meta.to_json()))}
        buffer = io.BytesIO()
        torch.save(snapshot.tensors, buffer)
        hashes[STATE] = write_synced(temporary / STATE, buffer.getbuffer())
        testhooks.hang_in_snapshot(destination.name, temporary)  # tests kill the process here: a torn snapshot
        testhooks.crash_point("snapshot-half-written")
        for name, array in snapshot.arrays.items():
            hashes[f"{ARRAYS}/{name}.npy"] = _write_array(temporary / ARRAYS / f"{name}.npy", array)
        log_hashes, logs = write_logs(temporary, snapshot.logs, previous)
        manifest = manifest_bytes({**hashes, **log_hashes}, logs)
        write_synced(temporary / MANIFEST, manifest)
        for directory in (temporary / ARRAYS, temporary / LOGS, temporary):
            if directory.exists():
                fsync_path(directory)
    except BaseException:
        layout.remove(temporary)
        raise
    return Prepared(temporary, destination, hashlib.sha256(manifest).hexdigest(), size_bytes(temporary))


def read(path: Path, expected_sha256: str | None = None) -> Snapshot:
    """Load a snapshot after checking every file against its manifest (and the manifest against
    `expected_sha256`, the hash the registry recorded)."""
    import numpy as np
    import torch

    remote.materialize(path, expected_sha256)
    manifest = verify(path, expected_sha256)
    tensors = torch.load(path / STATE, map_location="cpu", weights_only=True)
    arrays = {
        # Memory-mapped: restoring copies each array once, into the agent's own preallocated one.
        name.removeprefix(f"{ARRAYS}/").removesuffix(".npy"): np.load(path / name, mmap_mode="r", allow_pickle=False)
        for name in manifest["files"]
        if name.startswith(f"{ARRAYS}/")
    }
    return Snapshot(meta=read_meta(path), tensors=tensors, arrays=arrays, logs=stored_logs(path, manifest))


def verify(path: Path, expected_sha256: str | None = None, *, deep: bool = True) -> dict[str, Any]:
    """`layout.verify`, the snapshot first fetched when its home is in object storage."""
    remote.materialize(path, expected_sha256)
    return layout.verify(path, expected_sha256, deep=deep)


def read_meta(path: Path) -> SnapshotMeta:
    """`layout.read_meta`: only meta.json, from the store when the working copy lacks the snapshot."""
    if not (path / META).is_file() and (raw := remote.read_bytes(path, META)) is not None:
        import json

        return SnapshotMeta.from_json(json.loads(raw))
    return layout.read_meta(path)


def remove(path: Path) -> None:
    """Delete a snapshot (or a torn one) the registry no longer lists: its folder, and in object
    storage its objects and the segments no other snapshot lists."""
    layout.remove(path)
    remote.remove(path)


def sweep_after(directory: Path, frame: int) -> list[Path]:
    """`layout.sweep_after`, in the store too (as paths in the working copy)."""
    return layout.sweep_after(directory, frame) + [directory / name for name in remote.sweep_after(directory, frame)]


def _write_array(path: Path, array: np.ndarray) -> str:
    """Stream an array to .npy without copying it, then hash what reached the file."""
    import numpy as np

    path.parent.mkdir(exist_ok=True)
    with open(path, "wb") as file:
        np.save(file, array, allow_pickle=False)
        file.flush()
        os.fsync(file.fileno())
    return hash_file(path)
