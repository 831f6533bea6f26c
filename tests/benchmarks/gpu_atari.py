"""rlrun against Stable-Baselines3 and CleanRL on a GPU: agent steps per second of DQN on Pong and
PPO on Breakout, every side's networks on the same CUDA device, in the same run.

    python tests/benchmarks/gpu_atari.py [--algorithms dqn ppo] [--dqn-frames 10000]
        [--ppo-frames 10240] [--cleanrl-python VENV/bin/python --cleanrl-dir DIR] [--device cuda]

The sides and their settings are `atari_vs_sb3.py`'s (SB3's zoo settings against the built-ins
`dqn_pong` and `ppo_breakout`, learning starting at a tenth of the DQN budget, a 10k memory) and
`cleanrl_per_cpu.py`'s (CleanRL's `dqn_atari` and `ppo_atari` in their own environment); rlrun
trains its built-ins with `meta.device=cuda`. On a GPU the wall clock is what a user waits for, so
each rate is agent steps per wall second: rlrun and SB3 timed inside the run from a tenth of the
budget to the end, CleanRL from the difference of a run of T and one of 2T (T: half the budget),
which cancels its start-up. Each side gets one CPU thread for torch and steps its env copies in its
own process. Without a CUDA GPU it says so and exits 2 (`--device cpu` runs it on the CPU: a dry
run of the script).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import atari_vs_sb3  # this folder is the script's: on sys.path
import cleanrl_per_cpu
from gpu_device import require_cuda

CLEANRL_PAIRS = {"dqn": "dqn_atari", "ppo": "ppo_atari"}


def rates(algorithm: str, budget: int, seed: int, device: str, cleanrl: tuple[str, Path] | None) -> list[float]:
    """rlrun's, SB3's and (with `cleanrl`) CleanRL's agent steps per wall second."""
    theirs, ours = atari_vs_sb3.measure(algorithm, budget, seed, device=device)
    measured = [ours["fps"], theirs["fps"]]
    if cleanrl is not None:
        python, folder = cleanrl
        try:
            measured.append(
                cleanrl_per_cpu.cleanrl_rates(
                    CLEANRL_PAIRS[algorithm], python, folder, budget // 2, cuda=device == "cuda"
                )[1]
            )
        except SystemExit as failure:  # the other two columns still stand
            print(f"CleanRL's {CLEANRL_PAIRS[algorithm]} failed: {str(failure)[-2000:]}", file=sys.stderr)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=list(atari_vs_sb3.SPECS), choices=list(atari_vs_sb3.SPECS))
    parser.add_argument("--dqn-frames", type=int, default=10_000, help="budget; learning starts at a tenth")
    parser.add_argument("--ppo-frames", type=int, default=10_240, help="budget, a multiple of 2,048")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cleanrl-python", help="CleanRL's own interpreter (leave out: no CleanRL column)")
    parser.add_argument("--cleanrl-dir", type=Path, help="the folder with CleanRL's scripts")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    if args.dqn_frames % 10_000 or args.ppo_frames % 2_048:
        raise SystemExit(
            "--dqn-frames: a multiple of 10,000; --ppo-frames: of 2,048 (a tenth starts the timing,"
            " CleanRL's T is half the budget)"
        )
    where = require_cuda() if args.device == "cuda" else "the CPU (a dry run)"
    cleanrl = (args.cleanrl_python, args.cleanrl_dir) if args.cleanrl_python else None
    print(f"agent steps per wall second, networks on {where}, one torch thread each")
    print(
        f"{'algo':<5} {'spec':<13} {'frames':>7} {'rlrun f/s':>10} {'SB3 f/s':>9} {'CleanRL f/s':>12} "
        f"{'vs SB3':>7} {'vs CleanRL':>11}"
    )
    for algorithm in args.algorithms:
        budget = args.dqn_frames if algorithm == "dqn" else args.ppo_frames
        ours, theirs, *clean = rates(algorithm, budget, args.seed, args.device, cleanrl)
        versus_cleanrl = f"{ours / clean[0]:>11.2f}" if clean else f"{'-':>11}"
        cleanrl_rate = f"{clean[0]:>12.0f}" if clean else f"{'-':>12}"
        print(
            f"{algorithm:<5} {atari_vs_sb3.SPECS[algorithm]:<13} {budget:>7} {ours:>10.0f} {theirs:>9.0f} "
            f"{cleanrl_rate} {ours / theirs:>7.2f} {versus_cleanrl}",
            flush=True,
        )


if __name__ == "__main__":
    main()
