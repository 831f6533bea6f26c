"""rlrun against CleanRL's single-file agents, frames per CPU-second, one torch thread each.

    python tests/benchmarks/cleanrl_per_cpu.py --cleanrl-python VENV/bin/python --cleanrl-dir DIR
        [--pairs ppo_atari dqn_atari ppo_continuous_action sac_continuous_action] [--frames 4096]

CleanRL is not a package: DIR holds its scripts as the repository has them (`cleanrl/ppo_atari.py`,
`dqn_atari.py`, `ppo_continuous_action.py`, `sac_continuous_action.py` and the `cleanrl_utils`
package they import), and VENV is a virtual environment of its own (torch, gymnasium, ale-py,
opencv-python-headless, tyro, tensorboard), never rlrun's.

Each CleanRL script runs twice in a fresh process on the CPU (`--no-cuda`), with budgets T and
2T: the difference of the two processes' CPU times over T frames is its per-frame cost with its
start-up (imports, env creation) cancelled out. rlrun trains the matching built-in for 2T frames
and is timed from a tenth of the budget to the end. A frame is one agent step of one env copy on
both sides (Atari: four emulator frames). The hyper-parameters are each side's own:
- ppo_atari / ppo_breakout: the same (the PPO paper's Atari settings: 8 copies, 128 steps, 4 epochs
  of 4 minibatches, Nature CNN); CleanRL's Breakout is `BreakoutNoFrameskip-v4`, rlrun's
  `ALE/Breakout-v5` with the same preprocessing.
- dqn_atari / dqn_pong: CleanRL's defaults (a gradient step of 32 every 4 frames) with learning
  starting at 1,000 frames and a 10k memory on both sides, PongNoFrameskip-v4 for CleanRL.
- ppo_continuous_action / ppo_pendulum and sac_continuous_action / sac_pendulum on Pendulum-v1:
  CleanRL's defaults (one copy, 2048 steps, 10 epochs of 32 minibatches; SAC learning from 5,000
  frames, one critic step and an actor step every 2) against rlrun's built-ins (their
  hyper-parameters differ: the ratio is of two whole agents, not of the same arithmetic).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

from speed_vs_sb3 import SINGLE_THREAD, run_rlrun  # this folder is the script's: on sys.path

# CleanRL script -> (its arguments beyond the budget, the rlrun built-in, --set edits for it)
PAIRS: dict[str, tuple[list[str], str, list[str]]] = {
    "ppo_atari": (["--env-id", "BreakoutNoFrameskip-v4"], "ppo_breakout", []),
    "dqn_atari": (["--env-id", "PongNoFrameskip-v4", "--learning-starts", "1000", "--buffer-size", "10000"],
                  "dqn_pong", ["agent.learning_starts=1000", "agent.memory.capacity=10000"]),
    "ppo_continuous_action": (["--env-id", "Pendulum-v1"], "ppo_pendulum", []),
    "sac_continuous_action": (["--env-id", "Pendulum-v1"], "sac_pendulum", []),
}

RUNNER = r'''
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
'''


def cleanrl_cpu_seconds(python: str, folder: Path, name: str, frames: int, extra: list[str]) -> float:
    """CPU seconds of one CleanRL process (its own and its children's) trained for `frames`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    args = [python, "-c", RUNNER, str(folder / f"{name}.py"), "--total-timesteps", str(frames), "--no-cuda",
            "--seed", "1", *extra]
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True,
                          env={**os.environ, **SINGLE_THREAD, "PYTHONPATH": str(folder)})
    if done.returncode != 0:
        raise SystemExit(f"CleanRL {name} failed:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl-python", required=True)
    parser.add_argument("--cleanrl-dir", required=True, type=Path, help="the folder with CleanRL's scripts")
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--frames", type=int, default=4096, help="T: the frames the difference is taken over")
    args = parser.parse_args()
    print(f"frames per CPU-second, one torch thread each, {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.1f} at the start)")
    print(f"{'CleanRL':<22} {'rlrun':<13} {'CleanRL f/cpu-s':>16} {'rlrun f/cpu-s':>14} {'ratio':>6}")
    for name in args.pairs:
        extra, builtin, edits = PAIRS[name]
        frames = args.frames
        if name == "sac_continuous_action":  # learning starts at 5,000: time only frames that learn
            extra = [*extra, "--learning-starts", "1000"]
            edits = [*edits, "agent.learning_starts=1000"]
        short = cleanrl_cpu_seconds(args.cleanrl_python, args.cleanrl_dir, name, frames, extra)
        long = cleanrl_cpu_seconds(args.cleanrl_python, args.cleanrl_dir, name, 2 * frames, extra)
        theirs = frames / max(long - short, 1e-9)
        ours = run_rlrun(builtin, 2 * frames, 1, *edits, "meta.num_eval_episodes=1")["cpu_fps"]
        print(f"{name:<22} {builtin:<13} {theirs:>16.0f} {ours:>14.0f} {ours / theirs:>6.2f}", flush=True)
    print(f"(python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
