"""Append-only logs in snapshots: large data written once, at disk speed, and shared by the
snapshots that follow.

A *log* is a sequence that only grows, of which a ring buffer holds the newest items (the replay
memory's rows and frames): item i, counted from the first ever appended, lives at
`ring[i % len(ring)]` while it is among the newest `len(ring)`. Items never change once appended,
so a file holding items [start, end) stays true for as long as any of them is needed. A snapshot
stores its window [end - len(ring), end) as *segments*, `.npy` files named by their range
(`layout.segment_file`):

- the segments of the session's previous snapshot that still hold items of the window are
  hard-linked, not written: a snapshot writes only the items appended since the previous one;
- new items are cut into segments at multiples of `SEGMENT_BYTES` worth of items and at the ring's
  wrap, so each is one contiguous slice of the ring, streamed to disk without a copy while other
  threads hash the segments from the ring (sha256 with SHA-NI: ~1.8 GB/s a core, several times a
  disk's speed when the CPU is free; on a busy 2-core machine it was the bottleneck until the
  segments were hashed on every core), and fsync'd once all are written.

Why hard links rather than a per-session store of segments referenced from manifests: every
snapshot folder stays complete on its own (copy it, import it, verify it, as before), deleting a
snapshot is still deleting its folder, and the file system counts the references: a segment is
freed with the last snapshot that names it, so retention, `rlrun gc` and `rlrun rm` need no
reference counting of their own and can leave no orphan segment behind. (Where the file system
refuses a link, the segment is written again: slower, never wrong.)

"The previous snapshot" is the one the writing process's memory descends from: the snapshot it
resumed from, then each one it wrote. A session resumed from an older snapshot (a rewind) therefore
never links a segment written after it.

Reading maps one segment at a time (`StoredLog.fill`) and copies the window's items into the
ring chunk by chunk, dropping each copied chunk from the mapping, so restoring costs the ring plus
one chunk of resident memory, never a second copy of the data.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun import testhooks
from rlrun.fsutil import fsync_path
from rlrun.snapshot.layout import LOGS, MANIFEST, SnapshotError, segment_file

if TYPE_CHECKING:
    import numpy as np

SEGMENT_BYTES = 256 << 20
"""New items are cut into files of at most this size: a later snapshot of a ring that wrapped
needs few items of its oldest segment, and this bounds what it keeps of one for them."""
_CHUNK = 32 << 20  # written, hashed and restored in pieces of this size


@dataclass(frozen=True)
class Log:
    """What a snapshot stores of a log: the ring holding its newest items and how many were ever
    appended (`end`). The ring is read, never copied, while the snapshot is written."""

    ring: np.ndarray
    end: int

    @property
    def start(self) -> int:
        """The oldest item still in the ring."""
        return max(0, self.end - len(self.ring))

    def describe(self) -> dict[str, Any]:
        """What a segment must match to be shared with this log."""
        return {"capacity": len(self.ring), "dtype": str(self.ring.dtype), "shape": list(self.ring.shape[1:])}


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    path: Path


@dataclass(frozen=True)
class StoredLog:
    """A log as a snapshot holds it: `end` and the segments that cover its window."""

    end: int
    capacity: int
    segments: tuple[Segment, ...]

    def fill(self, ring: np.ndarray) -> None:
        """Copy the window's items into `ring` (of the capacity written), mapping one segment at
        a time; SnapshotError when a segment does not fit the ring."""
        import numpy as np

        if len(ring) != self.capacity:
            raise SnapshotError(f"a log of capacity {self.capacity} cannot be restored into a ring of {len(ring)}")
        start = max(0, self.end - self.capacity)
        for segment in self.segments:
            with _mapped(segment.path) as (items, release):
                if (
                    items.dtype != ring.dtype
                    or items.shape[1:] != ring.shape[1:]
                    or len(items) != segment.end - segment.start
                ):
                    raise SnapshotError(f"{segment.path} does not hold the items its name says; use another checkpoint")
                step = max(1, _CHUNK // max(1, ring.itemsize * int(np.prod(ring.shape[1:]))))
                for first, last in _ring_pieces(max(segment.start, start), segment.end, len(ring)):
                    for piece in range(first, last, step):
                        end = min(last, piece + step)
                        slot = piece % len(ring)
                        ring[slot : slot + end - piece] = items[piece - segment.start : end - segment.start]
                        release(piece - segment.start, end - segment.start)


@contextmanager
def _mapped(path: Path) -> Iterator[tuple[np.ndarray, Callable[[int, int], None]]]:
    """A .npy file's array, memory-mapped read-only, and a function that drops items [a, b) from
    this process's mapping once copied (the file's pages stay in the page cache, but no longer
    count in the process's resident memory: a restore holds one chunk of a segment, not a copy)."""
    import mmap

    import numpy as np

    with open(path, "rb") as file:
        version = np.lib.format.read_magic(file)
        if version != (1, 0):
            raise SnapshotError(f"{path} is not a segment this rlrun wrote; use another checkpoint")
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
        offset = file.tell()
        if fortran or dtype.hasobject:
            raise SnapshotError(f"{path} is not a segment this rlrun wrote; use another checkpoint")
        size = os.fstat(file.fileno()).st_size
        if size == offset:  # an empty segment: nothing to map
            yield np.empty(shape, dtype), lambda first, last: None
            return
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    item = dtype.itemsize * int(np.prod(shape[1:]))

    def release(first: int, last: int) -> None:
        begin = (offset + first * item) // mmap.PAGESIZE * mmap.PAGESIZE
        mapping.madvise(mmap.MADV_DONTNEED, begin, offset + last * item - begin)

    items = np.ndarray(shape, dtype, buffer=mapping, offset=offset)
    try:
        yield items, release
    finally:
        del items
        mapping.close()


def load(stored: StoredLog) -> Log:
    """A stored log read into a new ring of its capacity (to write the snapshot anew elsewhere)."""
    import numpy as np

    if not stored.segments:
        return Log(np.zeros(stored.capacity, np.uint8), stored.end)
    first = np.load(stored.segments[0].path, mmap_mode="r", allow_pickle=False)
    ring = np.zeros((stored.capacity, *first.shape[1:]), dtype=first.dtype)
    del first
    stored.fill(ring)
    return Log(ring, stored.end)


def stored_logs(folder: Path, manifest: dict[str, Any]) -> dict[str, StoredLog]:
    """The logs a (verified) manifest lists, their segments in order; SnapshotError when they do
    not cover their window."""
    found = {}
    for name, entry in manifest.get("logs", {}).items():
        segments = tuple(Segment(start, end, folder / file) for start, end, file in entry["segments"])
        covered = max(0, entry["end"] - entry["capacity"])
        for segment in segments:
            if segment.start > covered:
                break
            covered = max(covered, segment.end)
        if covered < entry["end"]:
            raise SnapshotError(
                f"checkpoint {folder}: log {name} misses items {covered}..{entry['end']}; use another checkpoint"
            )
        found[name] = StoredLog(entry["end"], entry["capacity"], segments)
    return found


# ---------------------------------------------------------------------------------------------
# Writing


def write_logs(folder: Path, logs: dict[str, Log], previous: Path | None) -> tuple[dict[str, str], dict[str, Any]]:
    """Write (or link from `previous`) the segments of each log into the snapshot being written
    in `folder`; returns the files' sha256 hashes and the manifest's "logs" entry."""
    if not logs:
        return {}, {}
    (folder / LOGS).mkdir()
    earlier = _manifest(previous)
    hashes: dict[str, str] = {}
    entries: dict[str, Any] = {}
    written: list[Path] = []
    pending: dict[str, Future[str]] = {}
    # Segments are hashed from the ring on every core while the main thread writes them: sha256
    # (~1.8 GB/s a core with SHA-NI) then keeps up with the disk even on a machine that is busy.
    with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="rlrun-hash") as hasher:
        for name, log in logs.items():
            segments = _link_earlier(folder, name, log, previous, earlier, hashes)
            covered = segments[-1][1] if segments else log.start
            for start, end in _new_ranges(covered, log.end, len(log.ring), log.ring.itemsize):
                file = segment_file(name, start, end)
                slot = start % len(log.ring)
                header, raw = _npy(log.ring[slot : slot + end - start])
                pending[file] = hasher.submit(_sha256, header, raw)
                _write_segment(folder / file, header, raw)
                segments.append([start, end, file])
                written.append(folder / file)
            entries[name] = {"end": log.end, "segments": segments, **log.describe()}
        hashes.update({file: future.result() for file, future in pending.items()})
    for path in written:  # synced once all are written: the disk never waits for the next segment's bytes
        fsync_path(path)
    return hashes, entries


def _manifest(previous: Path | None) -> dict[str, Any] | None:
    """The previous snapshot's manifest, when it is there and of this format (else nothing is
    linked: its files are written again)."""
    if previous is None:
        return None
    try:
        manifest: dict[str, Any] = json.loads((previous / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    return manifest if "logs" in manifest else None


def _link_earlier(
    folder: Path, name: str, log: Log, previous: Path | None, earlier: dict[str, Any] | None, hashes: dict[str, str]
) -> list[list[Any]]:
    """Hard-link the previous snapshot's segments of `log` that still hold items of its window,
    oldest first and without a gap; returns them as manifest entries. Their hashes are the ones
    the previous manifest recorded: a segment damaged since fails the deep check of both."""
    entry = (earlier or {}).get("logs", {}).get(name)
    if (
        previous is None
        or earlier is None
        or entry is None
        or {k: entry.get(k) for k in ("capacity", "dtype", "shape")} != log.describe()
    ):
        return []
    linked: list[list[Any]] = []
    covered = log.start
    for start, end, file in entry["segments"]:
        if end <= covered:
            continue  # every item of it has left the ring
        if start > covered or end > log.end:
            break
        try:
            os.link(previous / file, folder / file)
        except OSError:
            break  # no hard links here (or the file is gone): the rest is written again
        hashes[file] = earlier["files"][file]
        linked.append([start, end, file])
        covered = end
    return linked


def _new_ranges(start: int, end: int, capacity: int, item_bytes: int) -> Iterator[tuple[int, int]]:
    """[start, end) cut at the ring's wrap and at multiples of SEGMENT_BYTES worth of items: fixed
    cut points, so runs that snapshot at different frames still cut alike."""
    per_segment = max(1, SEGMENT_BYTES // max(1, item_bytes))
    while start < end:
        cut = min(end, (start // per_segment + 1) * per_segment, (start // capacity + 1) * capacity)
        yield start, cut
        start = cut


def _ring_pieces(start: int, end: int, capacity: int) -> Iterator[tuple[int, int]]:
    """[start, end) cut where the ring wraps."""
    while start < end:
        cut = min(end, (start // capacity + 1) * capacity)
        yield start, cut
        start = cut


def _npy(items: np.ndarray) -> tuple[bytes, memoryview]:
    """A contiguous slice of a ring as a .npy file's bytes: its header, and the ring's own bytes
    (a view: no copy)."""
    import io

    import numpy as np

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(items))
    return header.getvalue(), (items.reshape(-1).view(np.uint8) if items.size else np.empty(0, np.uint8)).data


def _sha256(header: bytes, raw: memoryview) -> str:
    digest = hashlib.sha256(header)
    for offset in range(0, len(raw), _CHUNK):
        digest.update(raw[offset : offset + _CHUNK])  # releases the GIL
    return digest.hexdigest()


def _write_segment(path: Path, header: bytes, raw: memoryview) -> None:
    """Write a segment's bytes (the caller fsyncs)."""
    with open(path, "wb") as file:
        file.write(header)
        for offset in range(0, len(raw), _CHUNK):
            file.write(raw[offset : offset + _CHUNK])
            testhooks.crash_point("segment-half-written")
