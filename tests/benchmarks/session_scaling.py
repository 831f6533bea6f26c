"""How one session scales with the cores it is given: env copies stepped in worker processes
(`env.vectorization: "async"`, one process per copy) and torch threads for the learner
(`meta.torch_threads`), against the same session stepping its copies in its own process.

    python tests/benchmarks/session_scaling.py [--spec ppo_breakout] [--frames 6144]
        [--copies 2 8 16] [--threads 1 2]

Each configuration trains one session of `--spec` in a fresh process, `env.num_envs` set to each
of `--copies` (the algorithm's rollout or memory sees that many copies: the run is a different
run, the per-frame work the same), and is timed from the first tenth of `--frames` to the end in
wall time (what more cores buy) and in the session process's CPU time (its workers' excluded).
On a machine with fewer cores than workers this is a simulation of a many-core machine: the
workers share the cores there are, so read how the rate moves with the counts, and run it on the
many-core machine itself for the real figure.
"""

from __future__ import annotations

import argparse
import os
import time

from speed_vs_sb3 import run_rlrun  # this folder is the script's: on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="ppo_breakout")
    parser.add_argument("--frames", type=int, default=6144)
    parser.add_argument("--copies", nargs="+", type=int, default=[2, 8, 16])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    args = parser.parse_args()
    print(f"{args.spec}, {args.frames:,} frames a configuration, on {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.1f} at the start)")
    print(f"{'copies':>6} {'stepped in':>15} {'torch threads':>13} {'f/s':>8} {'f/cpu-s':>8} {'seconds':>8}")
    for copies in args.copies:
        layouts = [("sync", 1), *(("async", threads) for threads in args.threads)]
        for vectorization, threads in layouts:
            started = time.perf_counter()
            result = run_rlrun(args.spec, args.frames, 0, f"env.num_envs={copies}",
                               f"env.vectorization={vectorization}", f"meta.torch_threads={threads}",
                               "meta.num_eval_episodes=1")
            where = "this process" if vectorization == "sync" else f"{copies} workers"
            print(f"{copies:>6} {where:>15} {threads:>13} {result['fps']:>8.0f} {result['cpu_fps']:>8.0f} "
                  f"{time.perf_counter() - started:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
