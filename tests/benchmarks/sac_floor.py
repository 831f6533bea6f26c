"""How fast SAC on Pendulum could be against SB3 with SAC's arithmetic: the floor set by its
256×256×256 matrix products, beside SB3's and rlrun's measured cost per frame, in the same run.

    python tests/benchmarks/sac_floor.py [--frames 6k] [--rounds 2] [--repeats 400]

A gradient step of SAC with the zoo's Pendulum settings (two 256-wide hidden layers for the actor
and each of two critics, batch 256, one step per frame) multiplies 256×256 matrices sixteen times,
whatever the code around them does:
- forward, eight: the two critics on the batch; the two target critics on the next observations;
  the actor on the next observations (for the target's action) and on the observations (for the
  actor's loss); the two critics on the actor's actions;
- the weights' gradient, three: each critic's hidden layer and the actor's;
- the input's gradient, five: each critic's hidden layer in the critic step (for the first
  layer's weights), each critic's again in the actor step (back to the actions), the actor's.
SB3 makes eighteen (it also takes the critics' weight gradients in the actor step, then drops
them). The other products (3 or 4 inputs into 256; 256 into 1) are small beside these.

This times those sixteen products as torch runs them for `nn.Linear` (forward `addmm` with the
weight transposed, `mm` for each gradient; one thread), and divides SB3's measured CPU time per
frame by them: no rlrun that keeps SAC's arithmetic can be faster than SB3 by more than that
bound, even if everything but the products cost nothing. rlrun's own time per frame is printed as
a multiple of the floor (how much is left around the products).
"""

from __future__ import annotations

import argparse
import time

import torch
from speed_vs_sb3 import frames, run_rlrun, run_sb3, sb3_python  # this folder is the script's: on sys.path

WIDTH, BATCH = 256, 256
PRODUCTS = {"forward": 8, "weight gradient": 3, "input gradient": 5}
"""SAC's 256×256×256 products per gradient step, by the form torch runs them in."""


def product_seconds(repeats: int) -> dict[str, float]:
    """CPU seconds of one 256×256×256 product in each form `nn.Linear` runs (best of five)."""
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    x, g, weight = (torch.randn(BATCH, WIDTH, generator=generator) for _ in range(3))
    bias = torch.randn(WIDTH, generator=generator)
    forms = {
        "forward": lambda: torch.addmm(bias, x, weight.t()),
        "weight gradient": lambda: torch.mm(g.t(), x),
        "input gradient": lambda: torch.mm(g, weight),
    }
    seconds = {}
    for name, product in forms.items():
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            for _ in range(repeats):
                product()
            best = min(best, (time.process_time() - started) / repeats)
        seconds[name] = best
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=frames, default=6_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=400, help="products per timing")
    args = parser.parse_args()
    from rlrun.spec import load_spec

    spec = load_spec("sac_pendulum", [f"meta.max_frame={args.frames}"])
    steps_per_frame = spec.agent.gradient_steps / spec.agent.train_frequency
    python = sb3_python()
    print("sac_pendulum, one torch thread; CPU microseconds per frame")
    print(
        f"{'round':>5} {'products':>9} {'SB3':>8} {'rlrun':>8} {'rlrun/SB3 speed':>16} {'bound':>6} {'rlrun/floor':>12}"
    )
    for round_ in range(args.rounds):
        each = product_seconds(args.repeats)
        floor = steps_per_frame * sum(PRODUCTS[name] * each[name] for name in PRODUCTS)
        theirs = 1 / run_sb3(python, spec.to_json(), args.frames, 0)["cpu_fps"]
        ours = 1 / run_rlrun("sac_pendulum", args.frames, 0)["cpu_fps"]
        print(
            f"{round_:>5} {floor * 1e6:>9.0f} {theirs * 1e6:>8.0f} {ours * 1e6:>8.0f} {theirs / ours:>15.2f}× "
            f"{theirs / floor:>5.2f}× {ours / floor:>11.2f}",
            flush=True,
        )
    print("bound: SB3's time per frame over the products' alone, the most any exact rlrun could gain")


if __name__ == "__main__":
    main()
