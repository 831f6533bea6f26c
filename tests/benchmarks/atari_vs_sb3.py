"""rlrun against Stable-Baselines3 on Atari: DQN on Pong and PPO on Breakout with the same
hyper-parameters (rlrun's built-ins `dqn_pong` and `ppo_breakout`, the rl-baselines3-zoo's), one
torch thread each, in the same run, in agent steps per CPU-second.

    python tests/benchmarks/atari_vs_sb3.py [--algorithms dqn ppo] [--dqn-frames 10000]
        [--ppo-frames 10240] [--rounds 1] [--seed 0] [--baseline DIR]

Both sides play the ALE v5 game one emulator frame at a time under the same preprocessing: SB3's
`make_atari_env` (its AtariWrapper) and `VecFrameStack`, rlrun's `env.atari` and `env.frame_stack`
(no-op starts, frame skip 4 with max-pooling, 84×84 grey, 4 frames stacked, a lost life terminal,
FIRE at the start, clipped rewards), with the v5 sticky actions (0.25 per emulator frame) drawn in
Python on both sides; the same Nature CNN (PPO: shared by the policy and the value heads).
- dqn: the zoo's settings, except that learning starts at a tenth of `--dqn-frames` and the replay
  memory holds 10k transitions (the zoo waits 100k frames), so the measure fits in minutes. Timed
  from learning's start to the end: acting, stepping, storing, a gradient step every 4.
- ppo: the zoo's settings (8 copies, 128 steps, 4 epochs of minibatches of 256, linear schedules
  over the budget). Timed from the end of the first rollout's update to the end: whole rollouts
  and updates on both sides (`--ppo-frames`: a multiple of 1,024).
Each side trains in a fresh process (SB3 from this interpreter or the benchmark's own virtual
environment, as `speed_vs_sb3.py` finds it); rounds alternate the sides, so a busy machine slows
both alike: read the CPU-time ratio. `--baseline DIR` also times the rlrun in DIR (a checkout:
`git archive REV | tar -x -C DIR`), interleaved, to measure a change on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from speed_vs_sb3 import SINGLE_THREAD, run_rlrun, sb3_python  # this folder is the script's: on sys.path

SPECS = {"dqn": "dqn_pong", "ppo": "ppo_breakout"}

SB3_WORKER = r'''
import json, sys, time
import torch
torch.set_num_threads(1)
import ale_py, gymnasium as gym
gym.register_envs(ale_py)
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

algorithm, spec, budget, start, seed = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
device = sys.argv[6]
agent, env_spec = spec["agent"], spec["env"]
env = make_atari_env(env_spec["id"], n_envs=env_spec["num_envs"], seed=seed,
                     wrapper_kwargs=dict(action_repeat_probability=0.25),
                     env_kwargs=dict(frameskip=1, repeat_action_probability=0.0))
env = VecFrameStack(env, n_stack=env_spec["frame_stack"])
if algorithm == "dqn":
    epsilon = agent["epsilon"]
    model = DQN("CnnPolicy", env, learning_rate=agent["optimizer"]["lr"], buffer_size=agent["memory"]["capacity"],
                learning_starts=agent["learning_starts"], batch_size=agent["batch_size"], gamma=agent["gamma"],
                target_update_interval=agent["target_update_frequency"], train_freq=agent["train_frequency"],
                gradient_steps=agent["gradient_steps"], exploration_initial_eps=epsilon["start"],
                exploration_final_eps=epsilon["end"], exploration_fraction=epsilon["to_frame"] / budget,
                max_grad_norm=agent["optimizer"]["grad_clip"], optimize_memory_usage=False, seed=seed, device=device)
else:
    lr, clip = agent["optimizer"]["lr"]["start"], agent["clip_range"]["start"]
    model = PPO("CnnPolicy", env, n_steps=agent["n_steps"], batch_size=agent["batch_size"], n_epochs=agent["n_epochs"],
                gamma=agent["gamma"], gae_lambda=agent["gae_lambda"], ent_coef=agent["entropy_coef"],
                vf_coef=agent["value_coef"], max_grad_norm=agent["optimizer"]["grad_clip"],
                learning_rate=lambda progress: progress * lr, clip_range=lambda progress: progress * clip,
                seed=seed, device=device)


class Stopwatch(BaseCallback):
    """Starts at `start` frames: DQN, where learning starts; PPO, at the first rollout after an update."""

    def _on_rollout_start(self):
        if algorithm == "ppo" and self.num_timesteps >= start and not hasattr(self, "started"):
            self.started = (self.num_timesteps, time.perf_counter(), time.process_time())

    def _on_step(self):
        if algorithm == "dqn" and self.num_timesteps >= start and not hasattr(self, "started"):
            self.started = (self.num_timesteps, time.perf_counter(), time.process_time())
        return True


watch = Stopwatch()
model.learn(budget, callback=watch)
frames, wall, cpu = budget - watch.started[0], time.perf_counter() - watch.started[1], time.process_time()
print(json.dumps({"fps": frames / wall, "cpu_fps": frames / (cpu - watch.started[2])}))
'''


def edits(algorithm: str, budget: int) -> list[str]:
    """rlrun's `--set` values for the measure (SB3 gets the spec they make); `run_rlrun` times from
    its first progress report, at a tenth of the budget, to the last."""
    short_eval = ["meta.num_eval_episodes=1", "meta.eval_max_steps=1000"]  # after the timed part: kept short
    if algorithm == "dqn":
        return [f"agent.learning_starts={budget // 10}", "agent.memory.capacity=10000", *short_eval]
    return short_eval


def run_sb3(
    python: Path, algorithm: str, spec: dict, budget: int, seed: int, device: str = "cpu", timeout: float | None = None
) -> dict[str, float]:
    """SB3's agent steps per second and per CPU-second, its networks on `device` (torch's name)."""
    args = [
        str(python),
        "-c",
        SB3_WORKER,
        algorithm,
        json.dumps(spec),
        str(budget),
        str(budget // 10),
        str(seed),
        device,
    ]
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **SINGLE_THREAD}, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"SB3 worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(
    algorithm: str, budget: int, seed: int = 0, python: Path | None = None, device: str = "cpu"
) -> tuple[dict, dict]:
    """SB3's and rlrun's measures of `algorithm`'s built-in trained for `budget` frames, both sides'
    networks on `device`."""
    from rlrun.spec import load_spec

    changes = edits(algorithm, budget)
    spec = load_spec(SPECS[algorithm], changes).to_json()
    theirs = run_sb3(python or sb3_python(), algorithm, spec, budget, seed, device)
    return theirs, run_rlrun(SPECS[algorithm], budget, seed, *changes, f"meta.device={device}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--dqn-frames", type=int, default=10_000, help="budget; learning starts at a tenth")
    parser.add_argument("--ppo-frames", type=int, default=10_240, help="budget, a multiple of 1,024")
    parser.add_argument("--rounds", type=int, default=1, help="repeat each measure, alternating the sides")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", help="a checkout of another rlrun to time beside this one")
    args = parser.parse_args()
    if args.dqn_frames % 10_000 or args.ppo_frames % 10_240:
        raise SystemExit(
            "--dqn-frames: a multiple of 10,000; --ppo-frames: of 10,240 (a tenth of each is where"
            " the timing starts: learning's start, a rollout's end)"
        )
    python = sb3_python()
    before = "   before f/cpu-s  after/before" if args.baseline else ""
    print("agent steps per CPU-second (one torch thread each; wall-clock ratio in brackets)")
    print(
        f"{'algo':<5} {'spec':<13} {'timed':>6} {'SB3 f/cpu-s':>12} {'rlrun f/cpu-s':>14} {'ratio':>6} "
        f"{'(wall)':>7}{before}"
    )
    for algorithm in args.algorithms:
        budget = args.dqn_frames if algorithm == "dqn" else args.ppo_frames
        for _ in range(args.rounds):
            theirs, ours = measure(algorithm, budget, args.seed, python)
            old = (
                run_rlrun(SPECS[algorithm], budget, args.seed, *edits(algorithm, budget), source=args.baseline)
                if args.baseline
                else None
            )
            line = (
                f"{algorithm:<5} {SPECS[algorithm]:<13} {budget - budget // 10:>6} {theirs['cpu_fps']:>12.1f} "
                f"{ours['cpu_fps']:>14.1f} {ours['cpu_fps'] / theirs['cpu_fps']:>6.2f} "
                f"({ours['fps'] / theirs['fps']:>5.2f})"
            )
            if old is not None:
                line += f" {old['cpu_fps']:>16.1f} {ours['cpu_fps'] / old['cpu_fps']:>13.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
