"""Snapshotting a large replay memory: rlrun's incremental segments against the disk's own speed,
Stable-Baselines3's `save_replay_buffer` and pickle, in one run on one disk.

    python tests/benchmarks/replay_snapshot.py [--gib 4] [--new 0.05] [--repeat 1] \
        [--peer-python /work/venvs/sb3/bin/python] [--folder /work]

Each measurement runs in a fresh process, so its resident memory (RSS) is its own:

- dd: `dd if=/dev/zero of=FILE bs=64M count=N conv=fdatasync`, GIB bytes: the disk's write speed;
- raw: one `write()` of GIB non-zero bytes, then fsync (a virtual disk may store zeros faster than
  data: this is the ceiling for a memory's bytes);
- rlrun: an Atari-shaped memory (84x84 uint8 frames, stack 4) whose frame ring is GIB bytes, full
  of non-zero data, written as a snapshot (`rlrun.snapshot.write`: segments fsync'd, sha256
  computed while writing); then `--new` of its rows replaced by new ones and a second snapshot
  written next to the first (it links the first's segments and writes only the new rows);
- SB3 (the peer's python): a ReplayBuffer of (4, 84, 84) uint8 observations holding GIB bytes
  (optimize_memory_usage, so observations only), saved as `save_replay_buffer` does
  (`save_util.save_to_pkl`: pickle), then fsync'd so the bytes are on disk as dd's and rlrun's are;
- pickle: `pickle.dump` of rlrun's arrays (frames and rows) to a file, then fsync (PFRL's
  ReplayBuffer.save pickles its memory; contiguous arrays are pickle's most favourable case).

Extra RSS is the peak resident memory while writing minus the resident memory just before
(sampled every 5 ms from /proc). Files go to a temporary folder under --folder (default: /work's
disk), removed after each measurement and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

FRAME = (84, 84)
STACK = 4
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * PAGE


@contextmanager
def peak_rss() -> Iterator[dict[str, int]]:
    """The peak RSS above the RSS at entry, sampled every 5 ms while the block runs."""
    result = {"before": rss(), "peak": rss()}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            result["peak"] = max(result["peak"], rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield result
    finally:
        done.set()
        sampler.join()
        result["peak"] = max(result["peak"], rss())
        result["extra"] = result["peak"] - result["before"]


def fill(array: np.ndarray, seed: int) -> None:
    """Non-zero, incompressible bytes (a zero page would not be resident, nor cost a write)."""
    flat = array.reshape(-1).view(np.uint8)
    pattern = np.random.default_rng(seed).integers(1, 256, 64 << 20, dtype=np.uint8)
    for offset in range(0, len(flat), len(pattern)):
        piece = flat[offset : offset + len(pattern)]
        piece[:] = pattern[: len(piece)]


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def synced_dump(path: Path, dump: Callable[[Any], None]) -> None:
    with open(path, "wb") as file:
        dump(file)
        file.flush()
        os.fsync(file.fileno())


def fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# ---------------------------------------------------------------------------------------------
# Workers (one process each)


def rlrun_worker(folder: Path, gib: float, new: float) -> dict[str, Any]:
    from rlrun import snapshot
    from rlrun.algorithms.replay import ReplayMemory
    from rlrun.spec import MemorySpec

    frame_bytes = FRAME[0] * FRAME[1]
    capacity = int(gib * (1 << 30) / frame_bytes / (1 + 1 / 16))  # the frame ring is GIB bytes
    memory = ReplayMemory(
        MemorySpec(capacity=capacity), (STACK, *FRAME), np.dtype(np.uint8), (), np.dtype(np.int64), frame_stack=STACK
    )
    fill(memory.frames, 1)
    memory.rows["obs"] = np.arange(capacity)[:, None] + np.arange(STACK)  # consistent frame numbers
    memory.rows["next"] = np.arange(capacity) + STACK
    memory.rows_end, memory.frames_end = capacity, len(memory.frames)
    meta = _meta()

    def write(name: str, previous: Path | None) -> snapshot.Written:
        state = memory.state_dict()
        return snapshot.write(
            folder / name, snapshot.Snapshot(meta, {"memory": state["memory"]}, logs=state["logs"]), previous=previous
        )

    nbytes = memory.frames.nbytes + memory.rows.nbytes
    with peak_rss() as first_rss:
        started = time.perf_counter()
        first = write("f1", None)
        first_seconds = time.perf_counter() - started
    added = int(capacity * new)  # new rows, and their frames, at the ring's next slots
    slots = np.arange(memory.frames_end, memory.frames_end + added) % len(memory.frames)
    memory.frames[slots] = memory.frames[(slots + 7) % len(memory.frames)] ^ 0x5A
    rows = np.arange(memory.rows_end, memory.rows_end + added) % capacity
    memory.rows["obs"][rows] = memory.frames_end + np.arange(added)[:, None] - STACK + 1 + np.arange(STACK)
    memory.rows_end, memory.frames_end = memory.rows_end + added, memory.frames_end + added
    with peak_rss() as second_rss:
        started = time.perf_counter()
        second = write("f2", first.path)
        second_seconds = time.perf_counter() - started
    linked = sum(1 for p in (second.path / "logs").iterdir() if p.stat().st_nlink > 1)
    written_bytes = sum(p.stat().st_size for p in (second.path / "logs").iterdir() if p.stat().st_nlink == 1)
    started = time.perf_counter()
    snapshot.verify(second.path, second.sha256, deep=True)
    verify_seconds = time.perf_counter() - started
    with peak_rss() as restore_rss:  # what a resume does after its deep check: read (verifies again), map, copy
        started = time.perf_counter()
        saved = snapshot.read(second.path, second.sha256)
        memory.load_state_dict({"memory": saved.tensors["memory"], "logs": saved.logs})
        restore_seconds = time.perf_counter() - started
    return {
        "bytes": nbytes,
        "transitions": capacity,
        "seconds": first_seconds,
        "extra_rss": first_rss["extra"],
        "rss_before": first_rss["before"],
        "second_seconds": second_seconds,
        "second_extra_rss": second_rss["extra"],
        "second_written_bytes": written_bytes,
        "second_linked_files": linked,
        "verify_seconds": verify_seconds,
        "restore_seconds": restore_seconds,
        "restore_extra_rss": restore_rss["extra"],
    }


def _meta() -> Any:
    from rlrun.snapshot import SnapshotMeta

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "snapshot-meta" / "captured-mid-episode.json"
    return SnapshotMeta.from_json(json.loads(fixture.read_text()))


def raw_worker(folder: Path, gib: float) -> dict[str, Any]:
    """The ceiling for non-zero bytes on this disk: one write() of the array, then fsync."""
    frames = np.empty((int(gib * (1 << 30) / (FRAME[0] * FRAME[1])), *FRAME), np.uint8)
    fill(frames, 4)
    seconds = timed(lambda: synced_dump(folder / "raw.bin", lambda f: f.write(frames.data)))
    return {"bytes": frames.nbytes, "seconds": seconds}


def pickle_worker(folder: Path, gib: float) -> dict[str, Any]:
    frame_bytes = FRAME[0] * FRAME[1]
    frames = np.empty((int(gib * (1 << 30) / frame_bytes), *FRAME), np.uint8)
    fill(frames, 2)
    memory = {"frames": frames, "actions": np.zeros(len(frames), np.int64)}
    with peak_rss() as used:
        seconds = timed(lambda: synced_dump(folder / "memory.pkl", lambda f: pickle.dump(memory, f)))
    return {
        "bytes": frames.nbytes + memory["actions"].nbytes,
        "seconds": seconds,
        "extra_rss": used["extra"],
        "rss_before": used["before"],
        "protocol": pickle.DEFAULT_PROTOCOL,
    }


def sb3_worker(folder: Path, gib: float) -> dict[str, Any]:
    import stable_baselines3
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.save_util import save_to_pkl

    size = int(gib * (1 << 30) / (STACK * FRAME[0] * FRAME[1]))
    buffer = ReplayBuffer(
        size,
        spaces.Box(0, 255, (STACK, *FRAME), np.uint8),
        spaces.Discrete(6),
        device="cpu",
        optimize_memory_usage=True,
        handle_timeout_termination=False,
    )
    fill(buffer.observations, 3)
    buffer.full, buffer.pos = True, 0
    nbytes = sum(a.nbytes for a in (buffer.observations, buffer.actions, buffer.rewards, buffer.dones))
    path = folder / "buffer.pkl"
    with peak_rss() as used:
        seconds = timed(lambda: (save_to_pkl(path, buffer), fsync(path)))  # save_replay_buffer's own call
    return {
        "bytes": nbytes,
        "transitions": size,
        "seconds": seconds,
        "extra_rss": used["extra"],
        "rss_before": used["before"],
        "version": stable_baselines3.__version__,
    }


WORKERS = {"raw": raw_worker, "rlrun": rlrun_worker, "pickle": pickle_worker, "sb3": sb3_worker}


# ---------------------------------------------------------------------------------------------
# The driver


def run_worker(python: str, name: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--new", str(args.new)] if name == "rlrun" else []
    done = subprocess.run(
        [python, __file__, "--worker", name, "--into", str(folder), "--gib", str(args.gib), *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def dd(folder: Path, gib: float) -> dict[str, Any]:
    count = int(gib * 16)  # 64 MiB blocks
    started = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={folder / 'dd.bin'}", "bs=64M", f"count={count}", "conv=fdatasync"],
        check=True,
        capture_output=True,
    )
    return {"bytes": count << 26, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=4.0, help="size of each memory, GiB")
    parser.add_argument("--new", type=float, default=0.05, help="fraction of new rows before the second snapshot")
    parser.add_argument(
        "--peer-python",
        default="/work/venvs/sb3/bin/python",
        help="a python with stable-baselines3 (skipped when missing)",
    )
    parser.add_argument("--folder", default="/work", help="where the temporary files go (its disk is measured)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the median is reported")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--into", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker = WORKERS[args.worker]
        extra = {"new": args.new} if args.worker == "rlrun" else {}
        print(json.dumps(worker(Path(args.into), args.gib, **extra)))
        return
    free = shutil.disk_usage(args.folder).free
    if free < args.gib * (1 << 30) * 1.5:
        raise SystemExit(f"{args.folder}: {free / 2**30:.1f} GiB free, {args.gib * 1.5:.1f} needed")
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(dir=args.folder, prefix=".replay-bench-") as scratch:
        order = [("dd", None), ("raw", sys.executable), ("rlrun", sys.executable), ("pickle", sys.executable)]
        if Path(args.peer_python).exists():
            order.append(("sb3", args.peer_python))
        for _ in range(args.repeat):  # interleaved, so a busy moment of the shared disk hits all alike
            for name, python in order:
                folder = Path(scratch) / name
                folder.mkdir()
                result = dd(folder, args.gib) if python is None else run_worker(python, name, folder, args)
                runs.setdefault(name, []).append(result)
                shutil.rmtree(folder)
    report({name: sorted(found, key=lambda r: r["seconds"])[len(found) // 2] for name, found in runs.items()}, args)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    disk = results["dd"]["bytes"] / results["dd"]["seconds"]

    def speed(r: dict[str, Any]) -> str:
        rate = r["bytes"] / r["seconds"]
        return (
            f"{r['bytes'] / 2**30:5.2f} GiB in {r['seconds']:6.2f} s = {rate / 1e6:6.0f} MB/s"
            f" ({rate / disk:4.0%} of dd)"
        )

    print(f"replay snapshot, {args.gib} GiB memories, {args.folder}, median of {args.repeat}")
    print(f"  dd conv=fdatasync   {speed(results['dd'])}")
    print(f"  write+fsync random  {speed(results['raw'])}   (one write() of non-zero bytes: this disk's ceiling)")
    r = results["rlrun"]
    print(
        f"  rlrun snapshot      {speed(r)}   extra RSS {r['extra_rss'] / 2**20:6.0f} MiB"
        f" ({r['extra_rss'] / r['rss_before']:.1%} of {r['rss_before'] / 2**30:.2f} GiB)"
    )
    fraction = r["second_written_bytes"] / r["bytes"]
    print(
        f"  rlrun 2nd snapshot  {args.new:.0%} new rows: {r['second_seconds']:6.2f} s"
        f" ({r['second_seconds'] / r['seconds']:.1%} of the first), wrote {r['second_written_bytes'] / 2**20:.0f}"
        f" MiB ({fraction:.1%}), linked {r['second_linked_files']} segments, extra RSS"
        f" {r['second_extra_rss'] / 2**20:.0f} MiB"
    )
    print(f"  rlrun deep verify   {r['verify_seconds']:6.2f} s (sha256 of every file, before a resume)")
    print(
        f"  rlrun restore       {r['restore_seconds']:6.2f} s (read: verify again, then map each segment and copy"
        f" it into the rings), extra RSS {r['restore_extra_rss'] / 2**20:.0f} MiB"
    )
    p = results["pickle"]
    print(f"  pickle.dump+fsync   {speed(p)}   extra RSS {p['extra_rss'] / 2**20:6.0f} MiB (protocol {p['protocol']})")
    if "sb3" in results:
        s = results["sb3"]
        print(f"  SB3 {s['version']} save   {speed(s)}   extra RSS {s['extra_rss'] / 2**20:6.0f} MiB")
        print(f"  rlrun / SB3 time per byte: {(r['seconds'] / r['bytes']) / (s['seconds'] / s['bytes']):.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
