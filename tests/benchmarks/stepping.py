"""Stepping across cores (issue 51): the CPU a step of every copy costs in this process
(`SyncVectorEnv`), in 2 worker processes through pipes (each step's actions, observations and
infos pickled: `BlockVectorEnv(transport="pipes")`, how workers stepped before) and in 2 worker
processes through shared memory (`BlockVectorEnv`'s default), with their ratios to this process.
For Atari, the peers that step in C++ beside them, in their synchronous modes (a batch of every
copy each step) and with the same preprocessing (`ppo_breakout`'s: sticky actions 0.25, 30 no-ops,
4 frames max-pooled, 84x84 grey, 4 stacked, a life lost ends the episode, fire on reset, rewards
clipped): ale-py's `AtariVectorEnv` (1 thread, and `--workers` threads) in this process, and
EnvPool's (`envpool.make(..., batch_size=num_envs)`, 1 thread) in the Python `--envpool-python`
names (EnvPool 0.8.4 needs NumPy 1: a virtual environment of its own; skipped without it).

    python tests/benchmarks/stepping.py [--envs cartpole breakout] [--copies 8] [--workers 2]
        [--steps 1500] [--rounds 3] [--envpool-python VENV/bin/python]

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
import subprocess
import tempfile
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


ENVPOOL = """
import sys, time, numpy as np, envpool
copies, threads, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
actions = np.load(path)
env = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=copies, batch_size=copies, num_threads=threads,
    repeat_action_probability=0.25, noop_max=30, frame_skip=4, img_height=84, img_width=84, stack_num=4,
    gray_scale=True, episodic_life=True, reward_clip=True, use_fire_reset=True, seed=0)
env.reset()
for action in actions[:50]:
    env.step(action)
started, before = time.perf_counter(), time.process_time()
for action in actions:
    env.step(action)
print((time.process_time() - before) / len(actions) * 1e6, (time.perf_counter() - started) / len(actions) * 1e6)
"""


class EnvPoolSide:
    """EnvPool in its own Python: each `measure` one process stepping the actions (start-up left out)."""

    def __init__(self, python: str, copies: int, threads: int) -> None:
        self.python, self.copies, self.threads = python, copies, threads

    def measure(self, actions: np.ndarray) -> tuple[float, float]:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "actions.npy")
            np.save(path, actions.astype(np.int32))
            done = subprocess.run(
                [self.python, "-c", ENVPOOL, str(self.copies), str(self.threads), path],
                capture_output=True,
                text=True,
                check=True,
            )
        used, wall = done.stdout.split()
        return float(used), float(wall)

    def close(self) -> None:
        pass


def ale_vector(spec: EnvSpec, threads: int) -> Any:
    """ale-py's C++ vector env with `ppo_breakout`'s preprocessing, every copy stepped each call."""
    from ale_py.vector_env import AtariVectorEnv

    game = spec.id.split("/")[-1].split("-")[0].lower()
    return AtariVectorEnv(
        game,
        spec.num_envs,
        batch_size=spec.num_envs,
        num_threads=threads,
        repeat_action_probability=0.25,
        noop_max=30,
        frameskip=4,
        img_height=84,
        img_width=84,
        stack_num=4,
        grayscale=True,
        episodic_life=True,
        reward_clipping=True,
        use_fire_reset=True,
    )


def make(side: str, spec: EnvSpec, workers: int, envpool_python: str | None = None) -> Any:
    copy = partial(make_recorded_env, spec)
    if side.startswith("ale-py"):
        return ale_vector(spec, int(side.split(", ")[1].split()[0]))
    if side.startswith("EnvPool"):
        assert envpool_python is not None
        return EnvPoolSide(envpool_python, spec.num_envs, 1)
    if side == "in process":
        return SyncVectorEnv([copy] * spec.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    transport = "pipes" if "pipes" in side else "shared"
    return BlockVectorEnv(copy, spec.num_envs, workers, transport=transport)


def measure(env: Any, actions: np.ndarray) -> tuple[float, float]:
    """(CPU µs, wall µs) per step of all copies."""
    if isinstance(env, EnvPoolSide):
        return env.measure(actions)
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
    parser.add_argument("--envpool-python", help="a Python with envpool 0.8.4 (NumPy 1) for EnvPool's side")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"{args.copies} copies, {args.workers} workers, {cores} usable cores "
        f"(load average {os.getloadavg()[0]:.1f} at the start); CPU and wall µs per step of all copies"
    )
    ours = ["in process", f"{args.workers} workers, pipes", f"{args.workers} workers, shared memory"]
    for name in args.envs:
        spec = spec_of(name, args.copies)
        sides = [*ours, *(peers(args) if spec.atari is not None else [])]
        envs = {side: make(side, spec, args.workers, args.envpool_python) for side in sides}
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
        print(f"{'stepped':>33} {'cpu us/step':>12} {'vs in process':>14} {'wall us/step':>13}  rounds (cpu)")
        for side in sides:
            used = statistics.median(c for c, _ in results[side])
            wall = statistics.median(w for _, w in results[side])
            rounds = " ".join(f"{c:.0f}" for c, _ in results[side])
            print(f"{side:>33} {used:>12.0f} {used / base:>13.2f}x {wall:>13.0f}  {rounds}", flush=True)


def peers(args: argparse.Namespace) -> list[str]:
    """The C++ peers' sides for an Atari env: ale-py's, and EnvPool's where its Python is given."""
    found = ["ale-py AtariVectorEnv, 1 thread", f"ale-py AtariVectorEnv, {args.workers} threads"]
    if args.envpool_python:
        found.append("EnvPool, 1 thread")
    else:
        print("EnvPool: skipped (give --envpool-python VENV/bin/python, a Python with envpool 0.8.4)")
    return found


if __name__ == "__main__":
    main()
