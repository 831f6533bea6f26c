"""Durable file writes: fsync'd data and atomic renames, so a crash never leaves half a file."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path


def write_synced(path: Path, data: bytes | memoryview) -> str:
    """Write and fsync `data`; returns its sha256."""
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return hashlib.sha256(data).hexdigest()


def umask_mode(mode: int = 0o666) -> int:
    """`mode` as the process's umask leaves it, the mode `open` gives a new file: what a file made
    by `tempfile.mkstemp` (always 0600) gets before it takes its final name."""
    try:  # Linux says it without changing it (os.umask can only be read by setting it)
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return mode & ~int(line.split()[1], 8)
    except OSError:
        pass
    current = os.umask(0o022)
    os.umask(current)
    return mode & ~current


def fsync_path(path: Path) -> None:
    """fsync a folder (so the names in it are durable), or a file already written and closed (its
    dirty pages belong to the file, not to the descriptor that wrote them)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` all at once: readers see the old file or the new, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        write_synced(temporary, data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    fsync_path(path.parent)


def folder_size(path: Path) -> int:
    """Bytes in the files under `path` (0 when it does not exist), a file with several names
    there (hard links: snapshots sharing a segment) counted once."""
    if not path.exists():
        return 0
    files = {(s.st_dev, s.st_ino): s.st_size for p in path.rglob("*") if p.is_file() and (s := p.stat())}
    return sum(files.values())


def bytes_freed_by_removing(paths: list[Path]) -> int:
    """Bytes deleting these folders would free: a file with several names (hard links) only when
    every one of them is among these folders."""
    seen: dict[tuple[int, int], list[int]] = {}
    for path in paths:
        for file in path.rglob("*") if path.is_dir() else ():
            if file.is_file():
                status = file.stat()
                entry = seen.setdefault((status.st_dev, status.st_ino), [status.st_size, status.st_nlink, 0])
                entry[2] += 1
    return sum(size for size, links, names in seen.values() if names >= links)
