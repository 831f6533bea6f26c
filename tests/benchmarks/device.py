"""`ppo_breakout` end to end on a lent GPU machine (issue 51): agent steps per wall second of rlrun
and Stable-Baselines3 at 16, 64 and 128 env copies, each side's networks on the GPU, in the same run;
CleanRL's `ppo_atari_envpool` beside them where EnvPool imports (else one line says why not).

    python tests/benchmarks/device.py [--copies 16 64 128] [--rollouts 5] [--timeout 150] [--quick]

The sides are `atari_vs_sb3.py`'s (the zoo's settings, the same preprocessing), with
`env.num_envs` set to each copy count on both. rlrun steps its copies as a user on that machine
would: `env.workers: auto` beside one learner thread (15 worker processes on 16 cores); SB3 in its
own process (`make_atari_env`'s `DummyVecEnv`). Each budget is `--rollouts` whole rollouts
(`n_steps` x copies), timed from a tenth of it to the end (`atari_vs_sb3.py`). Every side runs in a
fresh process under `--timeout` seconds; one that fails or runs out of time prints its reason and
the others still print. `--quick` is a dry run of the script on the CPU (2 and 4 copies, 32 steps a
rollout, 2 rollouts, the CPU device). `tests/benchmarks/device.sh` installs what the machine lacks,
runs this, then `tests/test_gpu.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from typing import Any

import atari_vs_sb3  # this folder is the script's: on sys.path
import speed_vs_sb3

SPEC = atari_vs_sb3.SPECS["ppo"]


def budget_of(copies: int, n_steps: int, rollouts: int) -> int:
    return copies * n_steps * rollouts


def side(name: str, measure: Any, timeout: float) -> str:
    """`measure()`'s agent steps per wall second, or why there is no figure."""
    started = time.perf_counter()
    try:
        fps = float(measure(timeout))
    except subprocess.TimeoutExpired:
        return f"{name}: over {timeout:g} s"
    except (SystemExit, Exception) as failure:  # one side's failure leaves the others' figures
        print(f"{name} failed: {str(failure)[-1500:]}", file=sys.stderr, flush=True)
        return f"{name}: failed"
    return f"{name} {fps:,.0f} steps/s ({time.perf_counter() - started:.0f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--rollouts", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=150, help="seconds for each side at each copy count")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="a dry run on the CPU: tiny budgets")
    args = parser.parse_args()
    from rlrun.spec import load_spec

    copies, rollouts, device, extra = args.copies, args.rollouts, args.device, []
    if args.quick:
        copies, rollouts, device, extra = [2, 4], 2, "cpu", ["agent.n_steps=32", "agent.batch_size=32"]
    python = speed_vs_sb3.sb3_python()
    cleanrl = importlib.util.find_spec("envpool") is not None
    print(f"{SPEC} end to end on {device}: agent steps per wall second, {rollouts} rollouts a side", flush=True)
    if not cleanrl:
        print("CleanRL's ppo_atari_envpool: skipped (EnvPool does not import here)", flush=True)
    for count in copies:
        edits = [*atari_vs_sb3.edits("ppo", 0), f"env.num_envs={count}", *extra]
        spec = load_spec(SPEC, edits)
        budget = budget_of(count, spec.agent.n_steps, rollouts)  # type: ignore[union-attr]
        document = spec.to_json()
        ours = side(
            "rlrun (env.workers auto)",
            lambda timeout, e=edits, b=budget: _rlrun(b, e, device, timeout),
            args.timeout,
        )
        theirs = side(
            "SB3",
            lambda timeout, d=document, b=budget: _sb3(python, d, b, device, timeout),
            args.timeout,
        )
        print(f"{count:>4} copies, {budget:,} frames: {ours} | {theirs}", flush=True)


def _rlrun(budget: int, edits: list[str], device: str, timeout: float) -> float:
    edits = [*edits, "env.workers=auto", f"meta.device={device}"]
    return float(speed_vs_sb3.run_rlrun(SPEC, budget, 0, *edits, timeout=timeout)["fps"])


def _sb3(python: Any, document: dict[str, Any], budget: int, device: str, timeout: float) -> float:
    return float(atari_vs_sb3.run_sb3(python, "ppo", document, budget, 0, device, timeout=timeout)["fps"])


if __name__ == "__main__":
    main()
