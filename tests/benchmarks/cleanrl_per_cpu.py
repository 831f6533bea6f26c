"""rlrun against CleanRL's single-file agents, frames per CPU-second, one torch thread each.

    python tests/benchmarks/cleanrl_per_cpu.py --cleanrl-python VENV/bin/python --cleanrl-dir DIR
        [--pairs ppo_atari ppo_atari_envpool dqn_atari ...] [--frames 4096]

CleanRL is not a package: DIR holds its scripts as the repository has them (`cleanrl/ppo_atari.py`,
`ppo_atari_envpool.py`, `dqn_atari.py`, `ppo_continuous_action.py`, `sac_continuous_action.py` and
the `cleanrl_utils` package they import), and VENV is a virtual environment of its own (torch,
gymnasium 0.29, ale-py, opencv-python-headless, tyro, tensorboard; envpool 0.8.4 for
`ppo_atari_envpool`; mujoco 3 and imageio for Hopper-v4 and HalfCheetah-v4), never rlrun's.

Each CleanRL script runs twice in a fresh process on the CPU (`--no-cuda`), with budgets T and
2T: the difference of the two processes' CPU times (all their threads) over T frames is its
per-frame cost with its start-up (imports, env creation) cancelled out. rlrun trains the matching
built-in for 2T frames and is timed from a tenth of the budget to the end. A frame is one agent step
of one env copy on both sides (Atari: four emulator frames). Pairs (`--pairs`, named by the CleanRL
script, then `:` and the built-in where a script meets more than one):
- ppo_atari, ppo_atari_envpool / ppo_breakout: the same hyper-parameters (the PPO paper's Atari
  settings: 8 copies, 128 steps, 4 epochs of 4 minibatches, Nature CNN). CleanRL's Breakout is
  `BreakoutNoFrameskip-v4` under gymnasium wrappers, or EnvPool's `Breakout-v5` (its C++ threads
  do the preprocessing; EnvPool picks its own thread count); rlrun's is `ALE/Breakout-v5` with the
  same preprocessing, stepped in the process.
- dqn_atari / dqn_pong: CleanRL's defaults (a gradient step of 32 every 4 frames) with learning
  starting at 1,000 frames and a 10k memory on both sides, PongNoFrameskip-v4 for CleanRL. The
  zoo's `dqn_pong` and CleanRL differ in target updates and ε schedule only (no arithmetic cost).
- ppo_continuous_action / ppo_hopper (Hopper-v4 for CleanRL, whose gymnasium 0.29 has no v5;
  rlrun's Hopper-v5 is the same robot) and :ppo_pendulum (Pendulum-v1): hyper-parameters DIFFER.
  CleanRL: one copy, 2,048 steps, 10 epochs of 32 minibatches (of 64), a 64-64 tanh network,
  observation and reward normalisation. `ppo_hopper` is the zoo's: as many gradient steps per frame
  (5 epochs of 512 steps in batches of 32) on half the batch, but a 256-256 relu network (~14× the
  weights), normalising alike; `ppo_pendulum` has CleanRL's network and gradient steps
  per frame (4 copies of 1,024 steps, 10 epochs of 64) without its normalisation. The ratio is of
  two whole agents, not of the same arithmetic.
- sac_continuous_action / sac_halfcheetah (HalfCheetah-v4 for CleanRL) and :sac_pendulum: both
  learn from 1,000 frames here (so the timed frames learn), one critic step a frame, 256-256 relu,
  batches of 256; they DIFFER in the actor: CleanRL updates it (and α) twice every second frame,
  rlrun once a frame, the same count. The zoo's `sac_pendulum` learns at lr 1e-3, CleanRL at 3e-4
  and 1e-3 (no cost).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from speed_vs_sb3 import SINGLE_THREAD, run_rlrun  # this folder is the script's: on sys.path

LEARNING_STARTS = 1000

# pair -> (CleanRL script, its arguments beyond the budget, the rlrun built-in, --set edits for it)
PAIRS: dict[str, tuple[str, list[str], str, list[str]]] = {
    "ppo_atari": ("ppo_atari", ["--env-id", "BreakoutNoFrameskip-v4"], "ppo_breakout", []),
    "ppo_atari_envpool": ("ppo_atari_envpool", ["--env-id", "Breakout-v5"], "ppo_breakout", []),
    "dqn_atari": (
        "dqn_atari",
        ["--env-id", "PongNoFrameskip-v4", "--learning-starts", str(LEARNING_STARTS), "--buffer-size", "10000"],
        "dqn_pong",
        [f"agent.learning_starts={LEARNING_STARTS}", "agent.memory.capacity=10000"],
    ),
    "ppo_continuous_action": ("ppo_continuous_action", ["--env-id", "Hopper-v4"], "ppo_hopper", []),
    "ppo_continuous_action:ppo_pendulum": ("ppo_continuous_action", ["--env-id", "Pendulum-v1"], "ppo_pendulum", []),
    "sac_continuous_action": (
        "sac_continuous_action",
        ["--env-id", "HalfCheetah-v4", "--learning-starts", str(LEARNING_STARTS)],
        "sac_halfcheetah",
        [f"agent.learning_starts={LEARNING_STARTS}"],
    ),
    "sac_continuous_action:sac_pendulum": (
        "sac_continuous_action",
        ["--env-id", "Pendulum-v1", "--learning-starts", str(LEARNING_STARTS)],
        "sac_pendulum",
        [f"agent.learning_starts={LEARNING_STARTS}"],
    ),
}

RUNNER = r"""
import runpy, sys
import gymnasium as gym, torch
torch.set_num_threads(1)
try:
    import ale_py
    gym.register_envs(ale_py)
except ImportError:
    pass
script = sys.argv[1]
sys.argv = [script, *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
"""


def cleanrl_seconds(
    python: str, folder: Path, name: str, frames: int, extra: list[str], cuda: bool = False
) -> tuple[float, float]:
    """CPU seconds (all its threads, and its children) and wall seconds of one CleanRL process trained
    for `frames`, its networks on the GPU when `cuda`."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    args = [
        python,
        "-c",
        RUNNER,
        str(folder / f"{name}.py"),
        "--total-timesteps",
        str(frames),
        "--cuda" if cuda else "--no-cuda",
        "--seed",
        "1",
        *extra,
    ]
    done = subprocess.run(
        args, cwd=folder, capture_output=True, text=True, env={**os.environ, **SINGLE_THREAD, "PYTHONPATH": str(folder)}
    )
    if done.returncode != 0:
        raise SystemExit(f"CleanRL {name} failed:\n{done.stderr[-3000:]}")
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), wall


def cleanrl_rates(pair: str, python: str, folder: Path, frames: int, cuda: bool = False) -> tuple[float, float]:
    """CleanRL's frames per CPU-second and per wall second in `pair`: runs of T = `frames` and 2T,
    their difference over T frames, so that start-up (imports, env creation, CUDA) cancels out."""
    script, extra, _, _ = PAIRS[pair]
    short = cleanrl_seconds(python, folder, script, frames, extra, cuda)
    long = cleanrl_seconds(python, folder, script, 2 * frames, extra, cuda)
    return frames / max(long[0] - short[0], 1e-9), frames / max(long[1] - short[1], 1e-9)


def measure(pair: str, python: str, folder: Path, frames: int) -> tuple[float, float]:
    """Frames per CPU-second of CleanRL's script and of rlrun's built-in in `pair`, T = `frames`."""
    _, _, builtin, edits = PAIRS[pair]
    theirs = cleanrl_rates(pair, python, folder, frames)[0]
    ours = run_rlrun(builtin, 2 * frames, 1, *edits, "meta.num_eval_episodes=1")["cpu_fps"]
    return theirs, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl-python", required=True)
    parser.add_argument("--cleanrl-dir", required=True, type=Path, help="the folder with CleanRL's scripts")
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--frames", type=int, default=4096, help="T: the frames the difference is taken over")
    args = parser.parse_args()
    print(
        f"frames per CPU-second, one torch thread each, {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f} at the start)"
    )
    print(f"{'CleanRL':<36} {'rlrun':<16} {'CleanRL f/cpu-s':>16} {'rlrun f/cpu-s':>14} {'ratio':>6}")
    for pair in args.pairs:
        theirs, ours = measure(pair, args.cleanrl_python, args.cleanrl_dir, args.frames)
        print(f"{pair:<36} {PAIRS[pair][2]:<16} {theirs:>16.0f} {ours:>14.0f} {ours / theirs:>6.2f}", flush=True)
    print(f"(python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
