"""Snapshots of a large replay memory into object storage: rlrun's upload against the library's own
bulk upload of the same bytes, incremental bytes, and the training loop's stall, in one run.

    python tests/benchmarks/object_store_snapshot.py [--gib 0.5] [--new 0.05] [--snapshots 6] \
        [--interval 3] [--repeat 2] [--endpoint URL --bucket NAME]

Without --endpoint an S3 server is started on loopback (moto's server mode, in its own process).
Moto is a Python server: on one machine it, not the client, sets the speed, so the ratios are what
this measures, not the absolute numbers (run against MinIO or S3 for those).

- upload: an Atari-shaped memory (84x84 uint8 frames, stack 4) whose frame ring is GIB bytes, full
  of non-zero data, staged as a snapshot in a URL home's working copy (`snapshot.prepare`), then
  uploaded (`Prepared.upload`: segments and files in one bulk request set, the manifest last);
  against `fs.put(folder, prefix, recursive=True)` of the very same staged folder by fsspec itself.
  Alternated --repeat times; the best of each.
- incremental: --new of the rows replaced by new ones, a second snapshot staged and uploaded: the
  bytes that reached the store against the new rows' bytes.
- stall: after one full snapshot (not timed), --snapshots snapshots, --interval seconds of
  "training" apart (a sleep: the loop's own work is not what is measured), each after --new new
  rows; the time the loop is held per snapshot, with the upload in the foreground (stage + upload)
  and in the background (rlrun's way: wait for the previous upload if it is still running, then
  stage). p50 and p99.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

FRAME, STACK = (84, 84), 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=0.5)
    parser.add_argument("--new", type=float, default=0.05)
    parser.add_argument("--snapshots", type=int, default=6)
    parser.add_argument("--interval", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--endpoint")
    parser.add_argument("--bucket", default="rlrun-bench")
    args = parser.parse_args()
    server = None
    if args.endpoint is None:
        server, args.endpoint = start_moto()
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    os.environ["AWS_ENDPOINT_URL"] = args.endpoint
    folder = Path(tempfile.mkdtemp(prefix="rlrun-objbench-"))
    try:
        import boto3

        if args.bucket not in {b["Name"] for b in boto3.client("s3").list_buckets().get("Buckets", [])}:
            boto3.client("s3").create_bucket(Bucket=args.bucket)
        print(json.dumps(measure(args, folder), indent=1))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if server is not None:
            server.terminate()
            server.wait()


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import time; from moto.server import ThreadedMotoServer; "
        f"ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False).start(); time.sleep(1e9)"
    )
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Memory:
    """An Atari-shaped replay memory (rlrun's own), full, with a way to add new rows."""

    def __init__(self, gib: float) -> None:
        from rlrun.algorithms.replay import ReplayMemory
        from rlrun.spec import MemorySpec

        capacity = int(gib * (1 << 30) / (FRAME[0] * FRAME[1]) / (1 + 1 / 16))  # the frame ring is GIB bytes
        self.capacity = capacity
        self.memory = ReplayMemory(
            MemorySpec(capacity=capacity),
            (STACK, *FRAME),
            np.dtype(np.uint8),
            (),
            np.dtype(np.int64),
            frame_stack=STACK,
        )
        generator = np.random.default_rng(1)
        for start in range(0, len(self.memory.frames), 4096):
            piece = self.memory.frames[start : start + 4096]
            piece[...] = generator.integers(1, 255, piece.shape, dtype=np.uint8)
        self.memory.rows["obs"] = np.arange(capacity)[:, None] + np.arange(STACK)
        self.memory.rows["next"] = np.arange(capacity) + STACK
        self.memory.rows_end, self.memory.frames_end = capacity, len(self.memory.frames)
        self.nbytes = self.memory.frames.nbytes + self.memory.rows.nbytes

    def add(self, fraction: float) -> int:
        """Replace `fraction` of the rows (and their frames) by new ones; the new bytes."""
        memory, added = self.memory, int(self.capacity * fraction)
        slots = np.arange(memory.frames_end, memory.frames_end + added) % len(memory.frames)
        memory.frames[slots] = memory.frames[(slots + 7) % len(memory.frames)] ^ 0x5A
        rows = np.arange(memory.rows_end, memory.rows_end + added) % self.capacity
        memory.rows["obs"][rows] = memory.frames_end + np.arange(added)[:, None] - STACK + 1 + np.arange(STACK)
        memory.rows_end, memory.frames_end = memory.rows_end + added, memory.frames_end + added
        return added * (memory.frames.itemsize * FRAME[0] * FRAME[1] + memory.rows.itemsize)

    def snapshot(self) -> Any:
        from rlrun import snapshot

        fixture = Path(__file__).resolve().parent.parent / "fixtures" / "snapshot-meta" / "captured-mid-episode.json"
        state = self.memory.state_dict()
        meta = snapshot.SnapshotMeta.from_json(json.loads(fixture.read_text()))
        return snapshot.Snapshot(meta, {"memory": state["memory"]}, logs=state["logs"])


def measure(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from rlrun import snapshot, storage

    home = storage.open_home(f"s3://{args.bucket}/{folder.name}", local=folder / "home")
    mirror = storage.mirror_of(home)
    assert mirror is not None
    memory = Memory(args.gib)
    checkpoints = home / "run" / "s0" / "checkpoints"
    stored = lambda: sum(mirror.sizes(mirror.root).values())  # noqa: E731

    # -- throughput: rlrun's upload against fsspec's own bulk upload of the same staged folder
    rlrun_seconds, bulk_seconds = [], []
    for attempt in range(args.repeat):
        mirror.delete(mirror.keys(mirror.root))
        started = time.perf_counter()
        prepared = snapshot.prepare(checkpoints / f"f{attempt}", memory.snapshot())
        stage_seconds = time.perf_counter() - started
        started = time.perf_counter()
        prepared.upload()
        rlrun_seconds.append(time.perf_counter() - started)
        uploaded = stored()
        started = time.perf_counter()
        mirror.fs.put(str(prepared.temporary), f"{mirror.root}/bulk/{attempt}", recursive=True)
        bulk_seconds.append(time.perf_counter() - started)
        prepared.discard()
    mib = uploaded / 2**20
    result: dict[str, Any] = {
        "gib": args.gib,
        "bytes_uploaded": uploaded,
        "stage_seconds": round(stage_seconds, 2),
        "rlrun_upload_mib_s": round(mib / min(rlrun_seconds), 1),
        "bulk_upload_mib_s": round(mib / min(bulk_seconds), 1),
        "rlrun_vs_bulk": round(min(bulk_seconds) / min(rlrun_seconds), 3),
    }

    # -- incremental: a second snapshot after --new new rows
    mirror.delete(mirror.keys(mirror.root))
    first = snapshot.write(checkpoints / "g1", memory.snapshot())
    before = stored()
    new_bytes = memory.add(args.new)
    snapshot.write(checkpoints / "g2", memory.snapshot(), previous=first.path)
    result.update(
        incremental_new_bytes=new_bytes,
        incremental_uploaded_bytes=stored() - before,
        incremental_ratio=round((stored() - before) / new_bytes, 3),
    )

    # -- stall per snapshot, the upload in the foreground and in the background
    for mode in ("foreground", "background"):
        mirror.delete(mirror.keys(mirror.root))
        shutil.rmtree(checkpoints, ignore_errors=True)
        result[f"stall_{mode}"] = stalls(memory, checkpoints, args, background=mode == "background")
    return result


def stalls(memory: Memory, checkpoints: Path, args: argparse.Namespace, *, background: bool) -> dict[str, float]:
    """The loop's stall per snapshot, as rlrun's session loop takes them (one upload in flight)."""
    from rlrun import snapshot

    held: list[float] = []
    previous: Path | None = snapshot.write(checkpoints / "start", memory.snapshot()).path  # steady state: not timed
    in_flight: tuple[Any, Future[None]] | None = None
    with ThreadPoolExecutor(1) as uploader:
        for index in range(args.snapshots):
            time.sleep(args.interval)  # training
            memory.add(args.new)
            started = time.perf_counter()
            if in_flight is not None:
                in_flight[1].result()
                in_flight[0].publish()
                previous = in_flight[0].destination
                in_flight = None
            prepared = snapshot.prepare(checkpoints / f"h{index}", memory.snapshot(), previous=previous)
            if background:
                in_flight = (prepared, uploader.submit(prepared.upload))
            else:
                prepared.upload()
                previous = prepared.publish().path
            held.append(time.perf_counter() - started)
        if in_flight is not None:
            in_flight[1].result()
    return {
        "p50_s": round(float(np.percentile(held, 50)), 3),
        "p99_s": round(float(np.percentile(held, 99)), 3),
        "max_s": round(max(held), 3),
    }


if __name__ == "__main__":
    main()
