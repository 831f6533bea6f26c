"""How one session scales with the cores it is given: its env copies stepped in its own process
("sync"), one process per copy ("async"), or in blocks by `env.workers` processes, and torch
threads for the learner (`meta.torch_threads`); `auto` for both, as this machine resolves it
(`rlrun.spec.cores.split_cores`). Each runs with the OpenMP wait policy a training command sets
(idle threads sleep); "spin" rows keep libgomp's default (idle threads spin), for comparison.

    python tests/benchmarks/session_scaling.py [--spec ppo_breakout] [--frames 4096]
        [--copies 8 16] [--workers 2 4 8] [--threads 1 2] [--stepping-frames 4096] [--device cpu]

Two parts, each configuration in a fresh process:
- stepping: the copies alone, random actions, no learner (what the workers can buy at most);
- training: one session of `--spec`, `env.num_envs` set to each of `--copies` (the rollout sees
  that many copies: another run, the same per-frame work).
Rates are frames per wall second (what more cores buy) and per CPU-second of every process the
configuration runs (the session's and its env workers', while they step: start-ups left out; what
the machine pays). Training is timed from its first progress report to the last. On a machine
with fewer cores than processes this is a simulation of a many-core machine: the processes share
the cores there are, so read how the CPU cost moves with the counts (the overhead of the pipes),
and run it on the many-core machine itself for what the wall clock gains. The machine's load
at the start is printed: say busy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from speed_vs_sb3 import SINGLE_THREAD  # this folder is the script's: on sys.path

from rlrun.spec.cores import OPENMP_WAIT_POLICY, let_idle_threads_sleep

# CPU time of this process and of its live children (the env workers), from /proc: a worker's
# time is counted while it runs, so its start-up (imports, the ROM) stays out, as the session's does.
CPU = r"""
import multiprocessing, os, time

TICK = os.sysconf("SC_CLK_TCK")


def cpu():
    total = time.process_time()
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        except (OSError, IndexError):
            pass
    return total
"""

TRAIN = (
    CPU
    + r"""
import json, sys, tempfile
from rlrun.session import events
from rlrun.spec import load_spec
from rlrun.training import train

name, overrides, budget = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
marks = []


def on_event(event):
    if isinstance(event, events.Progress) and (not marks or event.frame >= budget):
        marks.append((event.frame, time.perf_counter(), cpu()))


with tempfile.TemporaryDirectory() as home:
    train(load_spec(name, overrides), home=home, on_event=on_event)
(f0, w0, c0), (f1, w1, c1) = marks[0], marks[-1]
print(json.dumps({"fps": (f1 - f0) / (w1 - w0), "cpu_fps": (f1 - f0) / (c1 - c0)}))
"""
)

STEP = (
    CPU
    + r"""
import json, sys
from rlrun.envs import make_vector_env
from rlrun.spec import load_spec

name, overrides, frames = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
spec = load_spec(name, overrides)
env = make_vector_env(spec.env, sessions=spec.meta.sessions)
env.reset(seed=0)
env.action_space.seed(0)
actions = [env.action_space.sample() for _ in range(frames // spec.env.num_envs)]
started, c0 = time.perf_counter(), cpu()
for action in actions:
    env.step(action)
wall, used = time.perf_counter() - started, cpu() - c0
env.close()
done = len(actions) * spec.env.num_envs
print(json.dumps({"fps": done / wall, "cpu_fps": done / used}))
"""
)


def measure(script: str, spec: str, frames: int, edits: list[str], spin: bool = False) -> dict[str, float]:
    """One configuration in a fresh process, with the OpenMP wait policy of a training command
    (`let_idle_threads_sleep`), or libgomp's default spin (`spin`)."""
    env = {**os.environ, **SINGLE_THREAD}
    if spin:
        env.pop(OPENMP_WAIT_POLICY, None)
    else:
        let_idle_threads_sleep(env)
    done = subprocess.run(
        [sys.executable, "-c", script, spec, json.dumps(edits), str(frames)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"a configuration failed ({edits}):\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def layouts(copies: int, workers: list[int], threads: list[int]) -> list[tuple[str, int | str, list[str], bool]]:
    """(how the copies are stepped, torch threads, the spec edits, whether OpenMP spins) for one
    number of copies."""
    rows: list[tuple[str, int | str, list[str], bool]] = [("this process", t, [], False) for t in threads]
    rows += [("this process, spin", t, [], True) for t in threads if t > 1]
    rows.append((f"async, {copies} procs", threads[0], ["env.vectorization=async"], False))
    rows += [(f"{w} workers", threads[0], [f"env.workers={w}"], False) for w in workers if 1 < w <= copies]
    rows.append(("auto", "auto", ["env.workers=auto"], False))
    rows.append(("auto, spin", "auto", ["env.workers=auto"], True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="ppo_breakout")
    parser.add_argument("--frames", type=int, default=4096, help="training frames a configuration (0: none)")
    parser.add_argument("--stepping-frames", type=int, default=4096, help="stepped frames a configuration (0: none)")
    parser.add_argument("--copies", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--device", default="cpu", help="the learner's `meta.device` (cuda: the GPU's)")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"{args.spec} on {cores} usable cores, learner on {args.device} "
        f"(load average {os.getloadavg()[0]:.1f} at the start); "
        "f/s: frames per wall second, f/cpu-s: per CPU-second of every process"
    )
    for part, script, frames in (("stepping", STEP, args.stepping_frames), ("training", TRAIN, args.frames)):
        if frames <= 0:
            continue
        print(f"\n{part}, {frames:,} frames a configuration")
        print(f"{'copies':>6} {'stepped in':>18} {'threads':>7} {'f/s':>8} {'f/cpu-s':>8} {'f/s vs in process':>18}")
        for copies in args.copies:
            base = None
            for where, threads, edits, spin in layouts(copies, args.workers, args.threads):
                if part == "stepping" and (spin or (where == "this process" and threads != args.threads[0])):
                    continue  # no learner: threads change nothing
                settings = [
                    f"env.num_envs={copies}",
                    f"meta.torch_threads={threads}",
                    "meta.num_eval_episodes=1",
                    f"meta.max_frame={frames}",
                    f"meta.eval_frequency={frames}",
                    f"meta.checkpoint_frequency={frames}",
                    f"meta.log_frequency={max(frames // 8, 1)}",
                    "meta.sessions=1",
                    f"meta.device={args.device}",
                    *edits,
                ]
                result = measure(script, args.spec, frames, settings, spin)
                base = base or result["fps"]
                print(
                    f"{copies:>6} {where:>18} {threads!s:>7} {result['fps']:>8.0f} {result['cpu_fps']:>8.0f} "
                    f"{result['fps'] / base:>17.2f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
