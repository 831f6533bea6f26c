"""The snapshot format: the one module that writes and reads session snapshots.

A snapshot is a directory, made complete before it appears under its final name:

    f000000050000/
      MANIFEST.json   format version and the sha256 of every other file
      meta.json       plain JSON: clock, random-generator states, metrics, evaluations, spec, ...
      state.pt        tensors only (weights, optimiser, generator states): torch.load(weights_only=True)
      arrays/*.npy    large plain arrays (e.g. replay memory), saved without pickle

It is written into a hidden temporary directory, every file and the directory fsync'd, then renamed
into place; only then is it reported to the registry. Its sha256 is the hash of MANIFEST.json,
which covers every file, so the registry's hash verifies the whole snapshot. Nothing read here is
ever unpickled.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlrun.errors import BadInput
from rlrun.fsutil import fsync_dir, write_synced

FORMAT_VERSION = 1
MANIFEST = "MANIFEST.json"
META = "meta.json"
STATE = "state.pt"
ARRAYS = "arrays"
_CHUNK = 1 << 20
HANG_ENV = "RLRUN_TEST_HANG_IN_SNAPSHOT"


class SnapshotError(BadInput):
    """A snapshot is missing, incomplete, tampered with or of an unknown format."""


@dataclass
class Snapshot:
    meta: dict[str, Any]
    tensors: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Written:
    path: Path
    sha256: str
    size_bytes: int


def _pause_if_asked(destination: Path) -> None:
    """Test hook: hang half-way through writing the named snapshot, so a test can kill the
    process mid-write and check that the torn snapshot is never used."""
    if os.environ.get(HANG_ENV) == destination.name:
        time.sleep(3600)


def snapshot_name(frame: int) -> str:
    return f"f{frame:012d}"


def write(destination: Path, snapshot: Snapshot) -> Written:
    """Write `snapshot` atomically at `destination` (which must not exist yet)."""
    if destination.exists():
        raise FileExistsError(f"snapshot {destination} already exists")
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.parent / f".{destination.name}.tmp-{uuid.uuid4().hex[:8]}"
    temporary.mkdir()
    try:
        hashes = {META: write_synced(temporary / META, _json_bytes(snapshot.meta))}
        buffer = io.BytesIO()
        torch.save(snapshot.tensors, buffer)
        hashes[STATE] = write_synced(temporary / STATE, buffer.getbuffer())
        _pause_if_asked(destination)
        for name, array in snapshot.arrays.items():
            hashes[f"{ARRAYS}/{name}.npy"] = _write_array(temporary / ARRAYS / f"{name}.npy", array)
        manifest = _json_bytes({"format": FORMAT_VERSION, "files": hashes})
        write_synced(temporary / MANIFEST, manifest)
        for directory in (temporary / ARRAYS, temporary):
            if directory.exists():
                fsync_dir(directory)
        os.rename(temporary, destination)
        fsync_dir(destination.parent)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    size = sum(p.stat().st_size for p in destination.rglob("*") if p.is_file())
    return Written(destination, hashlib.sha256(manifest).hexdigest(), size)


def read(path: Path, expected_sha256: str | None = None) -> Snapshot:
    """Load a snapshot after checking every file against its manifest (and the manifest against
    `expected_sha256`, the hash the registry recorded)."""
    manifest = verify(path, expected_sha256)
    meta = json.loads((path / META).read_text())
    tensors = torch.load(path / STATE, map_location="cpu", weights_only=True)
    arrays = {
        # Memory-mapped: restoring copies each array once, into the agent's own preallocated one.
        name.removeprefix(f"{ARRAYS}/").removesuffix(".npy"): np.load(path / name, mmap_mode="r", allow_pickle=False)
        for name in manifest["files"]
        if name.startswith(f"{ARRAYS}/")
    }
    return Snapshot(meta=meta, tensors=tensors, arrays=arrays)


def read_meta(path: Path) -> dict[str, Any]:
    """Only the JSON part of a snapshot (its clock, say), unverified: for planning, not restoring."""
    meta: dict[str, Any] = json.loads((path / META).read_text())
    return meta


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
    if manifest.get("format") != FORMAT_VERSION:
        raise SnapshotError(
            f"checkpoint {path} has format {manifest.get('format')!r}; this rlrun reads format {FORMAT_VERSION}"
        )
    for name, digest in manifest["files"].items() if deep else ():
        file = path / name
        if not file.is_file() or _hash_file(file) != digest:
            raise SnapshotError(f"checkpoint {path}: {name} is missing or altered; use another checkpoint")
    return manifest


# ---------------------------------------------------------------------------------------------


def _json_bytes(document: Any) -> bytes:
    return json.dumps(document, indent=1, sort_keys=True, allow_nan=True).encode()


def _write_array(path: Path, array: np.ndarray) -> str:
    """Stream an array to .npy without copying it, then hash what reached the file."""
    path.parent.mkdir(exist_ok=True)
    with open(path, "wb") as file:
        np.save(file, array, allow_pickle=False)
        file.flush()
        os.fsync(file.fileno())
    return _hash_file(path)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def remove(path: Path) -> None:
    """Delete a snapshot the registry no longer lists."""
    shutil.rmtree(path, ignore_errors=True)


def sweep_incomplete(directory: Path) -> list[Path]:
    """Delete the temporary folders of snapshots whose writing was cut short (a kill mid-write);
    they were never renamed into place, so nothing refers to them."""
    swept = [p for p in directory.glob(".f*.tmp-*") if p.is_dir()] if directory.is_dir() else []
    for path in swept:
        shutil.rmtree(path, ignore_errors=True)
    return swept
