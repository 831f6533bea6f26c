"""rlrun's DQN against Stable-Baselines3's on Pong: the rl-baselines3-zoo Atari hyper-parameters
(rlrun's built-in `dqn_pong`), on the CPU with one thread, in the same run.

    python tests/benchmarks/atari_dqn_vs_sb3.py --sb3-python /path/to/sb3-venv/bin/python \\
        [--frames 20000] [--learning-starts 2000] [--buffer 10000] [--rounds 2]

Stable-Baselines3 (2.9, with ale-py and OpenCV) lives in a virtual environment of its own, whose
python `--sb3-python` names. Both sides play ALE/Pong-v5 one emulator frame at a time under the same
preprocessing (no-op starts, frame skip 4 with max-pooling, 84×84 grey, 4 frames stacked, a lost
life terminal, FIRE at the start, clipped rewards) with the v5 sticky actions (0.25, per emulator
frame), and learn with the zoo's settings, except `learning_starts` and the replay memory's size,
which are shortened so the measure fits in minutes (the zoo waits 100k frames before learning).
What is timed is `--frames` agent steps after learning starts (acting, stepping, storing, a
gradient step every 4): wall-clock and process CPU time, each side in a fresh process. Rounds
alternate the two sides, so a busy machine slows both alike; the CPU-time ratio is the steadier.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

SB3_WORKER = r'''
import json, sys, time
import torch
torch.set_num_threads(1)
import ale_py, gymnasium as gym
gym.register_envs(ale_py)
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

spec, frames, starts, seed = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
agent = spec["agent"]
env = make_atari_env("ALE/Pong-v5", n_envs=1, seed=seed, wrapper_kwargs=dict(action_repeat_probability=0.25),
                     env_kwargs=dict(frameskip=1, repeat_action_probability=0.0))
env = VecFrameStack(env, n_stack=4)
epsilon = agent["epsilon"]
model = DQN("CnnPolicy", env, learning_rate=agent["optimizer"]["lr"], buffer_size=agent["memory"]["capacity"],
            learning_starts=starts, batch_size=agent["batch_size"], gamma=agent["gamma"],
            target_update_interval=agent["target_update_frequency"], train_freq=agent["train_frequency"],
            gradient_steps=agent["gradient_steps"], exploration_initial_eps=epsilon["start"],
            exploration_final_eps=epsilon["end"], exploration_fraction=epsilon["to_frame"] / spec["meta"]["max_frame"],
            max_grad_norm=agent["optimizer"]["grad_clip"], optimize_memory_usage=False, seed=seed, device="cpu")


class Stopwatch(BaseCallback):
    def _on_step(self):
        if self.num_timesteps == starts:
            self.started = (time.perf_counter(), time.process_time())
        return True


watch = Stopwatch()
model.learn(starts + frames, callback=watch)
wall, cpu = time.perf_counter() - watch.started[0], time.process_time() - watch.started[1]
print(json.dumps({"wall_fps": frames / wall, "cpu_fps": frames / cpu}))
'''

RLRUN_WORKER = r'''
import json, sys, tempfile, time
from rlrun.session import events
from rlrun.spec import load_spec
from rlrun.training import train

overrides, frames, starts = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
marks = {}


def on_event(event):
    if isinstance(event, events.Progress) and event.frame in (starts, starts + frames):
        marks[event.frame] = (time.perf_counter(), time.process_time())


with tempfile.TemporaryDirectory() as home:
    train(load_spec("dqn_pong", overrides), home=home, on_event=on_event)
(w0, c0), (w1, c1) = marks[starts], marks[starts + frames]
print(json.dumps({"wall_fps": frames / (w1 - w0), "cpu_fps": frames / (c1 - c0)}))
'''


def run(python: str, code: str, *args: str) -> dict[str, float]:
    done = subprocess.run([python, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **SINGLE_THREAD})
    if done.returncode != 0:
        raise SystemExit(f"{Path(python).name} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sb3-python", required=True, help="python of a virtual environment with SB3 2.9")
    parser.add_argument("--frames", type=int, default=20_000, help="agent steps timed, after learning starts")
    parser.add_argument("--learning-starts", type=int, default=2_000)
    parser.add_argument("--buffer", type=int, default=10_000, help="replay memory capacity, both sides")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from rlrun.spec import load_spec

    if args.frames % 1000 or args.learning_starts % 1000:
        raise SystemExit("--frames and --learning-starts: multiples of 1000 (rlrun reports progress every 1000)")
    total = args.learning_starts + args.frames
    overrides = [f"agent.learning_starts={args.learning_starts}", f"agent.memory.capacity={args.buffer}",
                 f"meta.max_frame={total}", "meta.log_frequency=1000", f"meta.eval_frequency={total}",
                 f"meta.checkpoint_frequency={total}", "meta.num_eval_episodes=1", f"meta.seed={args.seed}"]
    spec = load_spec("dqn_pong", overrides).to_json()
    print(f"DQN on ALE/Pong-v5, zoo hyper-parameters, learning_starts {args.learning_starts:,}, buffer {args.buffer:,};"
          f" {args.frames:,} agent steps timed; 1 CPU thread")
    print(f"{'round':>5} {'SB3 f/s':>9} {'rlrun f/s':>10} {'ratio':>6}   {'SB3 f/cpu-s':>12} {'rlrun f/cpu-s':>14} "
          f"{'ratio':>6}")
    for round_ in range(args.rounds):
        theirs = run(args.sb3_python, SB3_WORKER, json.dumps(spec), str(args.frames), str(args.learning_starts),
                     str(args.seed))
        ours = run(sys.executable, RLRUN_WORKER, json.dumps(overrides), str(args.frames), str(args.learning_starts))
        print(f"{round_:>5} {theirs['wall_fps']:>9.1f} {ours['wall_fps']:>10.1f} "
              f"{ours['wall_fps'] / theirs['wall_fps']:>6.2f}   {theirs['cpu_fps']:>12.1f} {ours['cpu_fps']:>14.1f} "
              f"{ours['cpu_fps'] / theirs['cpu_fps']:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
