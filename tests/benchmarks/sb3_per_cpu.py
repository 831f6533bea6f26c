"""rlrun against Stable-Baselines3 2.9 on the PPO and SAC built-ins beyond CartPole, frames per
CPU-second, one torch thread each, the same hyper-parameters (the built-in's, read from its spec).

    python tests/benchmarks/sb3_per_cpu.py [--builtins ppo_breakout ppo_hopper sac_halfcheetah ...]
        [--frames 4096] [--learning-starts 1000]

(CartPole's PPO, A2C and DQN are `speed_vs_sb3.py`'s, `dqn_pong` is `atari_vs_sb3.py`'s.)
SB3 runs from `speed_vs_sb3.sb3_python()` (this interpreter when it has SB3 2.9, else that
benchmark's own virtual environment). Each side trains the built-in for `--frames` frames in a fresh
process and is timed in process CPU time from a tenth of the budget to its end (start-up, imports
and the first rollout left out alike); a frame is one agent step of one env copy (Atari: four
emulator frames). Atari: SB3's `make_atari_env` with the v5 sticky actions (0.25 per emulator frame)
and `VecFrameStack`, as `atari_vs_sb3.py` does; `env.normalize` becomes `VecNormalize` with the
spec's settings. SAC learns from `--learning-starts` on both sides (the zoo's 10k would leave
nothing timed). Evaluation is left out: rlrun evaluates once, at the end, outside the timed frames.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from speed_vs_sb3 import SINGLE_THREAD, run_rlrun, sb3_python  # this folder is the script's: on sys.path

BUILTINS = ["ppo_breakout", "ppo_hopper", "ppo_pendulum", "sac_halfcheetah", "sac_pendulum"]

SB3_WORKER = r'''
import json, sys, time
import gymnasium as gym
import torch
torch.set_num_threads(1)
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

spec, budget, seed = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
agent, env_spec = spec["agent"], spec["env"]


def schedule(value):
    """rlrun's constant or linear schedule as SB3's value or function of the progress remaining."""
    if isinstance(value, dict):
        start, end = value["start"], value.get("end", 0.0)
        return lambda remaining: end + remaining * (start - end)
    return value


if env_spec.get("atari"):
    import ale_py
    gym.register_envs(ale_py)
    env = make_atari_env(env_spec["id"], n_envs=env_spec["num_envs"], seed=seed,
                         wrapper_kwargs=dict(action_repeat_probability=0.25),
                         env_kwargs=dict(frameskip=1, repeat_action_probability=0.0))
    env = VecFrameStack(env, n_stack=env_spec["frame_stack"])
    policy, policy_kwargs = "CnnPolicy", {}
else:
    env = make_vec_env(env_spec["id"], n_envs=env_spec["num_envs"], seed=seed)
    hidden = agent["network"]["hidden"]
    activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[agent["network"]["activation"]]
    policy = "MlpPolicy"
    policy_kwargs = dict(activation_fn=activation, net_arch=dict(pi=hidden, vf=hidden) if agent["algorithm"] == "ppo"
                         else hidden)
normalize = env_spec.get("normalize")
if normalize:
    env = VecNormalize(env, norm_obs=normalize["observation"], norm_reward=normalize["reward"],
                       clip_obs=normalize["clip_obs"], clip_reward=normalize["clip_reward"], gamma=normalize["gamma"],
                       epsilon=normalize["epsilon"])
optimizer = agent["optimizer"]
if agent["algorithm"] == "ppo":
    if "log_std_init" in agent:
        policy_kwargs.update(log_std_init=agent["log_std_init"], ortho_init=False)
    policy_kwargs["optimizer_kwargs"] = dict(eps=optimizer.get("eps", 1e-8))
    model = PPO(policy, env, n_steps=agent["n_steps"], batch_size=agent["batch_size"], n_epochs=agent["n_epochs"],
                gamma=agent["gamma"], gae_lambda=agent["gae_lambda"], ent_coef=agent["entropy_coef"],
                vf_coef=agent["value_coef"], max_grad_norm=optimizer["grad_clip"],
                learning_rate=schedule(optimizer["lr"]), clip_range=schedule(agent["clip_range"]),
                normalize_advantage=agent["normalize_advantages"], policy_kwargs=policy_kwargs, seed=seed,
                device="cpu")
else:
    model = SAC(policy, env, learning_rate=schedule(optimizer["lr"]), buffer_size=agent["memory"]["capacity"],
                learning_starts=agent["learning_starts"], batch_size=agent["batch_size"], tau=agent["tau"],
                gamma=agent["gamma"], train_freq=agent["train_frequency"], gradient_steps=agent["gradient_steps"],
                ent_coef="auto", policy_kwargs=policy_kwargs, seed=seed, device="cpu")


class Stopwatch(BaseCallback):
    def _on_step(self):
        if self.num_timesteps >= budget // 10 and not hasattr(self, "started"):
            self.started = (self.num_timesteps, time.process_time())
        return True


watch = Stopwatch()
model.learn(budget, callback=watch)
print(json.dumps({"cpu_fps": (model.num_timesteps - watch.started[0]) / (time.process_time() - watch.started[1])}))
'''


def edits_for(builtin: str, learning_starts: int) -> list[str]:
    """The --set edits both sides train `builtin` with: SAC learns from `learning_starts`."""
    return [f"agent.learning_starts={learning_starts}"] if builtin.startswith("sac_") else []


def run_sb3(python: Path, builtin: str, frames: int, edits: list[str], seed: int = 1) -> float:
    """SB3's frames per CPU-second on `builtin` (with `edits`) over `frames` frames."""
    from rlrun.spec import load_spec

    spec = load_spec(builtin, edits).to_json()
    done = subprocess.run([str(python), "-c", SB3_WORKER, json.dumps(spec), str(frames), str(seed)],
                          capture_output=True, text=True, env={**os.environ, **SINGLE_THREAD})
    if done.returncode != 0:
        raise SystemExit(f"SB3 worker failed on {builtin}:\n{done.stderr[-3000:]}")
    result: float = json.loads(done.stdout.strip().splitlines()[-1])["cpu_fps"]
    return result


def measure(builtin: str, frames: int, learning_starts: int = 1000) -> tuple[float, float]:
    """Frames per CPU-second of SB3 and of rlrun on `builtin`, each trained for `frames` frames."""
    edits = edits_for(builtin, learning_starts)
    theirs = run_sb3(sb3_python(), builtin, frames, edits)
    ours = run_rlrun(builtin, frames, 1, *edits, "meta.num_eval_episodes=1")["cpu_fps"]
    return theirs, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builtins", nargs="+", default=BUILTINS, choices=BUILTINS)
    parser.add_argument("--frames", type=int, default=4096)
    parser.add_argument("--learning-starts", type=int, default=1000, help="SAC's, both sides")
    args = parser.parse_args()
    print(f"frames per CPU-second, one torch thread each, {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.1f} at the start)")
    print(f"{'built-in':<16} {'SB3 f/cpu-s':>12} {'rlrun f/cpu-s':>14} {'ratio':>6}")
    for builtin in args.builtins:
        theirs, ours = measure(builtin, args.frames, args.learning_starts)
        print(f"{builtin:<16} {theirs:>12.0f} {ours:>14.0f} {ours / theirs:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
