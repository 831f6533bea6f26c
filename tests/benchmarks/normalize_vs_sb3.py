"""Running normalisation (`env.normalize`, issue 28): what it costs per step, and `ppo_hopper` with it
against Stable-Baselines3 PPO + VecNormalize at the same budget and hyper-parameters (RL Zoo's).

    python tests/benchmarks/normalize_vs_sb3.py [--budget 50000] [--cost-budget 20000] [--seed 0]

(a) cost: `ppo_pendulum` trained with and without `env.normalize` (frames/s of the session's loop,
    the clock's wall time), and the normaliser alone per vector step (µs) beside a Pendulum step;
(b) return: `ppo_hopper` (normalised like the zoo's `normalize: true`, gamma 0.999) and SB3's PPO on
    Hopper-v5 with VecNormalize(gamma=0.999), both single-threaded, in the same run; each side's mean
    return over 10 greedy episodes with the training statistics frozen (rlrun: its final evaluation;
    SB3: `evaluate_policy` on a VecNormalize copy with training=False, norm_reward=False). RL Zoo reports
    ~2400+ for PPO on Hopper at 1M frames; a short budget shows the two learn alike, not that score.
Stable-Baselines3 must be importable by this interpreter (pip install stable-baselines3).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

SB3_WORKER = r"""
import json, sys, time
import gymnasium as gym
import torch
torch.set_num_threads(1)
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

budget, seed, spec = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
agent, normalize = spec["agent"], spec["env"]["normalize"]
env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed), gamma=normalize["gamma"],
                   clip_obs=normalize["clip_obs"], clip_reward=normalize["clip_reward"], epsilon=normalize["epsilon"])
hidden = agent["network"]["hidden"]
model = PPO("MlpPolicy", env, n_steps=agent["n_steps"], batch_size=agent["batch_size"], n_epochs=agent["n_epochs"],
            gamma=agent["gamma"], gae_lambda=agent["gae_lambda"], ent_coef=agent["entropy_coef"],
            vf_coef=agent["value_coef"], max_grad_norm=agent["optimizer"]["grad_clip"],
            learning_rate=agent["optimizer"]["lr"], clip_range=agent["clip_range"],
            policy_kwargs=dict(log_std_init=agent["log_std_init"], ortho_init=False, activation_fn=torch.nn.ReLU,
                               net_arch=dict(pi=hidden, vf=hidden)), seed=seed, device="cpu")
started = time.perf_counter()
model.learn(budget)
seconds = time.perf_counter() - started
evaluation = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed + 1000), training=False, norm_reward=False)
evaluation.obs_rms = env.obs_rms.copy()
mean, std = evaluate_policy(model, evaluation, n_eval_episodes=10, deterministic=True)
print(json.dumps({"fps": budget / seconds, "mean": float(mean), "std": float(std)}))
"""


def run_rlrun(name: str, budget: int, seed: int, *edits: str) -> dict:
    """Train one session; frames/s of its loop and its final evaluation (10 greedy episodes)."""
    from speed_vs_sb3 import run_rlrun as run_one  # this folder is the script's: on sys.path

    return run_one(name, budget, seed, "meta.num_eval_episodes=10", *edits)


def normaliser_microseconds(num_envs: int = 4, steps: int = 20_000) -> tuple[float, float]:
    """µs per vector step: the normaliser's training work (update, scale, the agent's view), and a
    Pendulum vector step with random actions."""

    from rlrun.envs import make_vector_env
    from rlrun.envs.normalize import Normalizer
    from rlrun.spec import EnvSpec, NormalizeSpec

    env = make_vector_env(EnvSpec(id="Pendulum-v1", num_envs=num_envs))
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    started = time.perf_counter()
    records = [env.step(action) for action in actions]
    env_us = (time.perf_counter() - started) / steps * 1e6
    normalizer = Normalizer(NormalizeSpec(), env.single_observation_space, num_envs)
    normalizer.reset(obs)
    started = time.perf_counter()
    for next_obs, reward, terminated, truncated, _ in records:
        normalizer.step(next_obs, reward, terminated | truncated)
        normalizer.observation(next_obs)
        normalizer.observation(next_obs)  # a rollout's next_obs, then the agent's view of it
    return (time.perf_counter() - started) / steps * 1e6, env_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=50_000, help="frames of ppo_hopper on each side")
    parser.add_argument("--cost-budget", type=int, default=20_000, help="frames of ppo_pendulum, with and without")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-hopper", action="store_true")
    args = parser.parse_args()
    from rlrun.spec import load_spec

    normaliser_us, env_us = normaliser_microseconds()
    print(
        f"(a) normaliser per vector step of 4 Pendulum copies: {normaliser_us:.1f} µs"
        f" (a random-action env step: {env_us:.1f} µs; ratio {normaliser_us / env_us:.2f})",
        flush=True,
    )
    plain = run_rlrun("ppo_pendulum", args.cost_budget, args.seed)
    normalised = run_rlrun("ppo_pendulum", args.cost_budget, args.seed, "env.normalize={}")
    print(
        f"    ppo_pendulum {args.cost_budget:,} frames: {plain['fps']:,.0f} f/s without, {normalised['fps']:,.0f} f/s"
        f" with env.normalize (ratio {normalised['fps'] / plain['fps']:.3f})",
        flush=True,
    )
    if args.skip_hopper:
        return
    spec = load_spec("ppo_hopper")
    assert spec.env.normalize is not None, "ppo_hopper normalises, as RL Zoo's Hopper does"
    done = subprocess.run(
        [sys.executable, "-c", SB3_WORKER, str(args.budget), str(args.seed), json.dumps(spec.to_json())],
        capture_output=True,
        text=True,
        env={**os.environ, **SINGLE_THREAD},
        check=True,
    )
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = run_rlrun("ppo_hopper", args.budget, args.seed)
    print(f"(b) ppo_hopper, {args.budget:,} frames, seed {args.seed}, 10 greedy episodes (zoo at 1M: ~2400+)")
    print(f"    {'':<22}{'f/s':>8} {'mean return':>18}")
    print(f"    {'SB3 PPO+VecNormalize':<22}{theirs['fps']:>8.0f} {theirs['mean']:>9.1f} ± {theirs['std']:<6.1f}")
    print(f"    {'rlrun ppo_hopper':<22}{ours['fps']:>8.0f} {ours['mean']:>9.1f} ± {ours['std']:<6.1f}")
    print(f"    ratio rlrun/SB3: f/s {ours['fps'] / theirs['fps']:.2f}, return {ours['mean'] / theirs['mean']:.2f}")


if __name__ == "__main__":
    main()
