"""rlrun against Stable-Baselines3 2.9 on the MuJoCo built-ins (PPO on Hopper, SAC on HalfCheetah),
frames per CPU-second, one torch thread each, the same hyper-parameters (the built-in's, read from
its resolved spec).

    python tests/benchmarks/sb3_per_cpu.py [--builtins ppo_hopper sac_halfcheetah]
        [--frames 4096] [--learning-starts 1000] [--seed 0]

The classic-control built-ins are `speed_vs_sb3.py`'s, the Atari ones `atari_vs_sb3.py`'s. This is
`speed_vs_sb3.py`'s measure (its SB3 worker and its rlrun worker: each side in a fresh process,
timed in process CPU time from a tenth of the budget to its end; `env.normalize` as SB3's
`VecNormalize`) with two edits on both sides, so that a short budget times learning: SAC learns
from `--learning-starts` (the zoo's 10k would leave nothing timed), and the final evaluation plays
one episode (outside the timed frames).
"""

from __future__ import annotations

import argparse
import os

from speed_vs_sb3 import run_rlrun, run_sb3, sb3_python  # this folder is the script's: on sys.path

BUILTINS = ["ppo_hopper", "sac_halfcheetah"]


def edits_for(builtin: str, learning_starts: int) -> list[str]:
    """The --set edits both sides train `builtin` with."""
    learning = [f"agent.learning_starts={learning_starts}"] if builtin.startswith("sac_") else []
    return [*learning, "meta.num_eval_episodes=1"]


def measure(builtin: str, frames: int, learning_starts: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Frames per CPU-second of SB3 and of rlrun on `builtin`, each trained for `frames` frames."""
    from rlrun.spec import load_spec

    edits = edits_for(builtin, learning_starts)
    theirs = run_sb3(sb3_python(), load_spec(builtin, [f"meta.max_frame={frames}", *edits]).to_json(), frames, seed)
    ours = run_rlrun(builtin, frames, seed, *edits)
    return theirs["cpu_fps"], ours["cpu_fps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builtins", nargs="+", default=BUILTINS, choices=BUILTINS)
    parser.add_argument("--frames", type=int, default=4096)
    parser.add_argument("--learning-starts", type=int, default=1000, help="SAC's, both sides")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"frames per CPU-second, one torch thread each, {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f} at the start)"
    )
    print(f"{'built-in':<16} {'SB3 f/cpu-s':>12} {'rlrun f/cpu-s':>14} {'ratio':>6}")
    for builtin in args.builtins:
        theirs, ours = measure(builtin, args.frames, args.learning_starts, args.seed)
        print(f"{builtin:<16} {theirs:>12.0f} {ours:>14.0f} {ours / theirs:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
