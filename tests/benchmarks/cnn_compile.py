"""What `torch.compile` would buy the CPU learner of `ppo_breakout` (issue 51): the Nature CNN's
forward and backward pass on one PPO minibatch (256 stacks of 4 84x84 frames, `ppo_breakout`'s
network: the convolutions, 512 hidden, a policy and a value head), eager as rlrun runs it (channels
last in memory, oneDNN's convolutions: already adopted) against `torch.compile` (inductor), in
CPU milliseconds per minibatch, one torch thread, and whether the gradients are the same bits.

    python tests/benchmarks/cnn_compile.py [--batch 256] [--repeats 20] [--threads 1]

The compile's own time (its first calls) is printed apart: a session would pay it at each start.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlrun.algorithms.base import NatureCNN
from rlrun.spec import load_spec


def model() -> nn.Module:
    spec = load_spec("ppo_breakout").agent.network  # type: ignore[union-attr]
    torso = NatureCNN(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), spec)
    return nn.ModuleDict({"torso": torso, "policy": nn.Linear(torso.width, 4), "value": nn.Linear(torso.width, 1)})


def loss_of(net: Any, obs: torch.Tensor) -> torch.Tensor:
    features = net["torso"](obs)
    return net["policy"](features).logsumexp(-1).mean() + net["value"](features).square().mean()


def timed(step: Any, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.process_time()  # CPU, not wall: other processes' load moves it less
        step()
        times.append((time.process_time() - started) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    eager = model()
    compiled_net = model()
    compiled_net.load_state_dict(eager.state_dict())
    obs = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (args.batch, 4, 84, 84), dtype=np.uint8))
    compiled_loss = torch.compile(loss_of)

    def step(net: Any, loss: Any) -> Any:
        def run() -> None:
            net.zero_grad(set_to_none=True)
            loss(net, obs).backward()

        return run

    started = time.perf_counter()
    step(compiled_net, compiled_loss)()
    step(compiled_net, compiled_loss)()
    compile_s = time.perf_counter() - started
    results: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(2):  # the sides take turns: a busy machine's load moves them alike
        results["eager"] += timed(step(eager, loss_of), args.repeats // 2)
        results["compiled"] += timed(step(compiled_net, compiled_loss), args.repeats // 2)
    same = all(
        torch.equal(a.grad, b.grad)  # type: ignore[arg-type]
        for a, b in zip(eager.parameters(), compiled_net.parameters(), strict=True)
    )
    base = statistics.median(results["eager"])
    print(f"minibatch of {args.batch}, {args.threads} thread(s); compile (first two calls): {compile_s:.1f} s")
    for side, times in results.items():
        median = statistics.median(times)
        print(f"{side:>9}: {median:8.1f} ms CPU forward+backward ({median / base:.2f}x eager)")
    print("gradients: the same bits" if same else "gradients: different bits (needs an arithmetic revision)")


if __name__ == "__main__":
    main()
