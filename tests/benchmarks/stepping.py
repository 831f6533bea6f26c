"""Stepping across cores (issue 51): the CPU a step of every copy costs in this process
(`SyncVectorEnv`), in 2 worker processes through pipes (each step's actions, observations and
infos pickled: `BlockVectorEnv(transport="pipes")`, how workers stepped before) and in 2 worker
processes through shared memory (`BlockVectorEnv`'s default), with their ratios to this process.

    python tests/benchmarks/stepping.py [--envs cartpole breakout] [--copies 8] [--workers 2]
        [--steps 1500] [--rounds 3]

CPU is that of this process and of its workers while they step (start-ups left out), per step of
all copies; fixed random actions, the same for every side. The sides take turns, `--rounds`
times, in one run (a busy machine's load moves them alike); the figure of each side is its
median. On a machine with fewer cores than processes the workers share the cores there are: read
the CPU a step costs, not the wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from functools import partial
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rlrun.envs import make_recorded_env
from rlrun.envs.workers import BlockVectorEnv
from rlrun.spec import EnvSpec, load_spec

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pids: list[int]) -> float:
    """CPU seconds of this process and of `pids` (user + system)."""
    total = time.process_time()
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def spec_of(name: str, copies: int) -> EnvSpec:
    if name == "cartpole":
        return EnvSpec(id="CartPole-v1", num_envs=copies)
    if name == "hopper":
        return EnvSpec(id="Hopper-v5", num_envs=copies)
    return load_spec(f"ppo_{name}", [f"env.num_envs={copies}"]).env


def make(side: str, spec: EnvSpec, workers: int) -> Any:
    copy = partial(make_recorded_env, spec)
    if side == "in process":
        return SyncVectorEnv([copy] * spec.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    transport = "pipes" if "pipes" in side else "shared"
    return BlockVectorEnv(copy, spec.num_envs, workers, transport=transport)


def measure(env: Any, actions: np.ndarray) -> tuple[float, float]:
    """(CPU µs, wall µs) per step of all copies."""
    env.reset(seed=0)
    pids = [process.pid for process in getattr(env, "_processes", [])]
    for action in actions[:50]:  # warm up
        env.step(action)
    started, before = time.perf_counter(), cpu(pids)
    for action in actions:
        env.step(action)
    used, wall = cpu(pids) - before, time.perf_counter() - started
    return used / len(actions) * 1e6, wall / len(actions) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["cartpole", "breakout"])
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"{args.copies} copies, {args.workers} workers, {cores} usable cores "
        f"(load average {os.getloadavg()[0]:.1f} at the start); CPU and wall µs per step of all copies"
    )
    sides = ["in process", f"{args.workers} workers, pipes", f"{args.workers} workers, shared memory"]
    for name in args.envs:
        spec = spec_of(name, args.copies)
        envs = {side: make(side, spec, args.workers) for side in sides}
        space = envs[sides[0]].single_action_space
        rng = np.random.default_rng(0)
        if hasattr(space, "n"):
            actions = rng.integers(0, space.n, (args.steps, args.copies))
        else:
            actions = rng.uniform(-1, 1, (args.steps, args.copies, *space.shape)).astype(space.dtype)
        results: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side in sides:
                results[side].append(measure(envs[side], actions))
        for env in envs.values():
            env.close()
        base = statistics.median(c for c, _ in results[sides[0]])
        print(f"\n{name} ({spec.id}), {args.steps} steps x {args.rounds} rounds")
        print(f"{'stepped':>28} {'cpu us/step':>12} {'vs in process':>14} {'wall us/step':>13}  rounds (cpu)")
        for side in sides:
            used = statistics.median(c for c, _ in results[side])
            wall = statistics.median(w for _, w in results[side])
            rounds = " ".join(f"{c:.0f}" for c, _ in results[side])
            print(f"{side:>28} {used:>12.0f} {used / base:>13.2f}x {wall:>13.0f}  {rounds}", flush=True)


if __name__ == "__main__":
    main()
