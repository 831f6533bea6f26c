"""Resident memory of an Atari replay memory (4 stacked 84x84 uint8 frames), filled through each
library's own `add`: rlrun's against Stable-Baselines3's ReplayBuffer with and without
optimize_memory_usage.

    python tests/benchmarks/atari_memory_rss.py [--capacity 1000000] [--sb3-fill 100000] \
        [--peer-python /work/venvs/sb3/bin/python]

Each memory is built with the full capacity and filled in a fresh process; the figure is the RSS
after filling minus the RSS before the memory was built (from /proc). Episodes of 1,000 steps,
frames drawn from a pool of random frames. rlrun is filled to its capacity. SB3's buffers hold
28 GB (optimized) and 56 GB (not) at 1M, more than a 24 GiB machine has: they are filled with
--sb3-fill transitions, measured, and their RSS at full capacity is extrapolated per transition
(both grow linearly: preallocated arrays whose pages become resident as they are written). rlrun
is measured at --sb3-fill too, so one row compares like with like. Where the kernel refuses even
to map a full-capacity SB3 buffer (more than RAM: 26 GiB, 53 GiB at 1M), it is built with
--sb3-fill capacity instead, and the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SHAPE = (4, 84, 84)
EPISODE = 1000
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * PAGE


class Episodes:
    """Stacked observations of made-up episodes: a new frame per step, EPISODE steps each."""

    def __init__(self) -> None:
        self.pool = np.random.default_rng(0).integers(0, 256, (257, *SHAPE[1:]), dtype=np.uint8)
        self.step = 0
        self.obs = np.repeat(self.pool[:1], 4, axis=0)

    def next(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """obs, true next obs, whether the episode ended (then obs moves on to a new first one)."""
        self.step += 1
        obs = self.obs
        following = np.concatenate([obs[1:], self.pool[self.step % 257][None]])
        ended = self.step % EPISODE == 0
        self.obs = np.repeat(self.pool[(self.step * 31) % 257][None], 4, axis=0) if ended else following
        return obs, following, ended


def rlrun_worker(capacity: int, fill: int) -> dict[str, Any]:
    from rlrun.algorithms.replay import ReplayMemory
    from rlrun.spec import MemorySpec

    before = rss()
    memory = ReplayMemory(
        MemorySpec(capacity=capacity), SHAPE, np.dtype(np.uint8), (), np.dtype(np.int64), frame_stack=4
    )
    episodes, zero, started = Episodes(), np.zeros(1), time.perf_counter()
    for _ in range(fill):
        obs, following, ended = episodes.next()
        memory.add(obs[None], np.zeros(1, np.int64), zero, following[None], np.array([ended]), np.array([False]))
    return {
        "rss": rss() - before,
        "filled": fill,
        "capacity": capacity,
        "seconds": time.perf_counter() - started,
        "allocated": memory.frames.nbytes + memory.rows.nbytes,
    }


def sb3_worker(capacity: int, fill: int, optimize: bool) -> dict[str, Any]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    before = rss()
    refused = None
    try:
        buffer = ReplayBuffer(
            capacity,
            spaces.Box(0, 255, SHAPE, np.uint8),
            spaces.Discrete(6),
            device="cpu",
            optimize_memory_usage=optimize,
            handle_timeout_termination=False,
        )
    except MemoryError as error:  # more than the machine has: the kernel refuses to even map it
        refused = str(error)
        buffer = ReplayBuffer(
            fill,
            spaces.Box(0, 255, SHAPE, np.uint8),
            spaces.Discrete(6),
            device="cpu",
            optimize_memory_usage=optimize,
            handle_timeout_termination=False,
        )
    episodes, started = Episodes(), time.perf_counter()
    for _ in range(fill):
        obs, following, ended = episodes.next()
        buffer.add(obs[None], following[None], np.zeros((1, 1)), np.zeros(1), np.array([ended]), [{}])
    arrays = [buffer.observations, buffer.actions, buffer.rewards, buffer.dones]
    if getattr(buffer, "next_observations", None) is not None:
        arrays.append(buffer.next_observations)
    return {
        "rss": rss() - before,
        "filled": fill,
        "capacity": buffer.buffer_size,
        "seconds": time.perf_counter() - started,
        "allocated": sum(a.nbytes for a in arrays),
        "refused": refused,
    }


def run(python: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([python, __file__, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--sb3-fill", type=int, default=100_000, help="transitions SB3's buffers are filled with")
    parser.add_argument("--peer-python", default="/work/venvs/sb3/bin/python")
    parser.add_argument("--worker", choices=["rlrun", "sb3", "sb3-optimized"], help=argparse.SUPPRESS)
    parser.add_argument("--fill", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fill = args.fill
        result = (
            rlrun_worker(args.capacity, fill)
            if args.worker == "rlrun"
            else sb3_worker(args.capacity, fill, optimize=args.worker == "sb3-optimized")
        )
        print(json.dumps(result))
        return
    common = ["--capacity", str(args.capacity)]
    rows = [
        ("rlrun", sys.executable, args.capacity),
        ("rlrun", sys.executable, args.sb3_fill),
        ("sb3-optimized", args.peer_python, args.sb3_fill),
        ("sb3", args.peer_python, args.sb3_fill),
    ]
    print(f"Atari replay memory (4x84x84 uint8), capacity {args.capacity:,}: RSS after filling")
    results = []
    for name, python, fill in rows:
        if not Path(python).exists():
            print(f"  {name}: {python} missing, skipped")
            continue
        r = run(python, "--worker", name, "--fill", str(fill), *common)
        full = r["rss"] / fill * args.capacity
        how = "measured" if fill == args.capacity else f"extrapolated from {fill:,} filled"
        print(
            f"  {name:14s} filled {fill:>9,}: RSS {r['rss'] / 1e9:6.2f} GB; at {args.capacity:,}:"
            f" {full / 1e9:6.2f} GB ({how}); arrays allocated {r['allocated'] / 1e9:6.2f} GB;"
            f" {fill / r['seconds']:,.0f} adds/s"
        )
        if r.get("refused"):
            print(
                f"  {'':14s} (a buffer of {args.capacity:,} could not be allocated here: {r['refused']};"
                f" built with {r['capacity']:,})"
            )
        results.append({"name": name, **r, "at_capacity": full})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
