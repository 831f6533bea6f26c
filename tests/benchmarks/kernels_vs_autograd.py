"""What the kernels buy: each classic-control built-in with `meta.kernels=auto` (the default), with
`meta.kernels=autograd` and with Stable-Baselines3, in frames per CPU-second, in the same run.

    python tests/benchmarks/kernels_vs_autograd.py [--specs ppo_cartpole sac_pendulum ...] [--frames 30k]
        [--seeds 0] [--rounds 1]

The three sides are `speed_vs_sb3.py`'s workers (each in its own fresh process with one torch thread,
timed from the first tenth of the budget to its end, the spec's hyper-parameters on both sides), the
autograd column the same rlrun worker with `--set meta.kernels=autograd`. The sides alternate round by
round; on a busy machine read the ratios, and measure on a quiet one before quoting the numbers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_vs_sb3 import SPECS, chosen_specs, frames, run_rlrun, run_sb3, sb3_python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", nargs="+", default=list(SPECS), choices=SPECS, metavar="SPEC")
    parser.add_argument("--algorithms", nargs="+", choices=("ppo", "a2c", "dqn", "sac"))
    parser.add_argument("--frames", type=frames, help="every budget, e.g. 30k (default: each spec's max_frame)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--rounds", type=int, default=1, help="repeat each measure, alternating the sides")
    args = parser.parse_args()
    from rlrun.spec import load_spec

    python = sb3_python()
    print("frames per CPU-second (one torch thread each)")
    print(
        f"{'spec':<14} {'seed':>4} {'frames':>8} {'SB3':>8} {'autograd':>9} {'auto':>8} "
        f"{'autograd/SB3':>13} {'auto/SB3':>9} {'auto/autograd':>14}"
    )
    for name in chosen_specs(args.specs, args.algorithms):
        budget = args.frames or load_spec(name).meta.max_frame
        sb3_spec = load_spec(name, [f"meta.max_frame={budget}"]).to_json()
        for seed in args.seeds:
            for _ in range(args.rounds):
                theirs = run_sb3(python, sb3_spec, budget, seed)["cpu_fps"]
                plain = run_rlrun(name, budget, seed, "meta.kernels=autograd")["cpu_fps"]
                ours = run_rlrun(name, budget, seed)["cpu_fps"]
                print(
                    f"{name:<14} {seed:>4} {budget:>8} {theirs:>8.0f} {plain:>9.0f} {ours:>8.0f} "
                    f"{plain / theirs:>13.2f} {ours / theirs:>9.2f} {ours / plain:>14.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
