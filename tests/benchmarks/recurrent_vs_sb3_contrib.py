"""rlrun's recurrent PPO against sb3-contrib's RecurrentPPO on the RL Zoo's partially observed tasks
(CartPoleNoVel, PendulumNoVel), with the zoo's hyper-parameters, in the same run: final returns over
seeds, frames per CPU-second and their ratio; and the memoryless PPO on the same task beside them.

    pip install "sb3-contrib>=2.3,<3"      # into rlrun's environment; it keeps the installed torch
    python tests/benchmarks/recurrent_vs_sb3_contrib.py [--tasks cartpole pendulum] [--seeds 0 1 2 3]
        [--frames 100k] [--sides sb3 rlrun memoryless] [--set KEY=VALUE ...] [--out results.jsonl]
        [--report results.jsonl ...]

The task is identical on every side: Gymnasium's `CartPole-v1` / `Pendulum-v1` wrapped in rlrun's
`rlrun.envs.pomdp:HideVelocities`, which zeroes the terms the zoo's `MaskVelocityWrapper` zeroes
(`CartPoleNoVel-v1`: cart velocity and pole angular velocity, observation[1] and [3];
`PendulumNoVel-v1`: angular velocity, observation[2]); sb3-contrib gets it as `wrapper_class` of
`make_vec_env`, rlrun in `env.wrappers`. Three rows a task, each trained in a fresh process with one
torch thread, per seed:
- sb3-contrib: `RecurrentPPO("MlpLstmPolicy")` with the zoo's `hyperparams/ppo_lstm.yml` entry as
  written (`ZOO` below, copied from rl-baselines3-zoo at 22e3ff2): `normalize: True` is `VecNormalize`
  with the agent's gamma, as the zoo does; `lin_X` is X times the progress remaining.
- rlrun: the built-in `ppo_lstm_cartpole_novel` / `ppo_lstm_pendulum_novel` (its translation of the
  same entry; see docs/benchmarks/recurrent.md for what it cannot translate). PendulumNoVel's takes
  the entry's minibatch as written (128-step chunks, `agent.sequence_length`) and its gSDE
  (`agent.sde`, every 4 steps).
- memoryless: rlrun's `ppo_cartpole` / `ppo_pendulum` hyper-parameters on the same no-velocity task:
  the control, which should fail to solve CartPoleNoVel.
`--frames` sets every budget (default: the zoo's, 1e5 frames each); the schedules of the built-ins
and of the zoo end at the budget, those of the memoryless specs at their own frame.

Evaluation, the same on every side: after the last update, 10 episodes of the deterministic policy
(the mean action, the most likely one) on a separate env copy seeded apart from training, the
observation normalised with the training statistics frozen, the raw reward summed, the memory
starting from zeros at each episode's start and carried through it. sb3-contrib: `evaluate_policy`
on a `VecNormalize(training=False, norm_reward=False)` env seeded seed + 1000 sharing `obs_rms`;
rlrun: the final evaluation the run records (`meta.num_eval_episodes=10`, `eval_deterministic`).

Speed: frames (one env step of one copy) per second of the training process's CPU time, measured
from the first tenth of the budget to its end (start-up, imports and evaluation left out alike), and
the ratio rlrun / sb3-contrib. Whether rlrun is no worse: P(rlrun > sb3-contrib) over the seeds'
final returns with its 95% stratified-bootstrap interval, computed as `rlrun compare` computes it
(`rlrun.compare.statistics.improvements`, rliable's probability of improvement) and read the same
way (`verdict_of`: improved above 0.5, regressed below, inconclusive when it holds 0.5).
Every result is also appended as a JSON line to `--out`; `--report`
prints the table from such files (for a run split over several invocations: then the ratio compares
runs that did not share the machine's load, read it with that in mind).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

# run as a script: its folder is on the path
from speed_vs_sb3 import SB3_LEARN_TIMED, SINGLE_THREAD, frames

ZOO: dict[str, dict[str, Any]] = {
    # rl-baselines3-zoo hyperparams/ppo_lstm.yml, "CartPoleNoVel-v1" (marked "Tuned")
    "cartpole": {
        "normalize": True,
        "n_envs": 8,
        "n_timesteps": 100_000,
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": "lin_0.001",
        "clip_range": "lin_0.2",
        "policy_kwargs": {
            "ortho_init": False,
            "activation_fn": "ReLU",
            "lstm_hidden_size": 64,
            "enable_critic_lstm": True,
            "net_arch": {"pi": [64], "vf": [64]},
        },
    },
    # "PendulumNoVel-v1" (marked "Tuned"); batch_size is RecurrentPPO's default, 128
    "pendulum": {
        "normalize": True,
        "n_envs": 4,
        "n_timesteps": 100_000,
        "n_steps": 1024,
        "gae_lambda": 0.95,
        "gamma": 0.9,
        "n_epochs": 10,
        "ent_coef": 0.0,
        "learning_rate": 1e-3,
        "clip_range": 0.2,
        "use_sde": True,
        "sde_sample_freq": 4,
        "policy_kwargs": {
            "ortho_init": False,
            "activation_fn": "ReLU",
            "lstm_hidden_size": 64,
            "enable_critic_lstm": True,
            "net_arch": {"pi": [64], "vf": [64]},
        },
    },
}
ENV_IDS = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}
NAMES = {"cartpole": "CartPoleNoVel", "pendulum": "PendulumNoVel"}
BUILTINS = {"cartpole": "ppo_lstm_cartpole_novel", "pendulum": "ppo_lstm_pendulum_novel"}
MEMORYLESS = {"cartpole": "ppo_cartpole", "pendulum": "ppo_pendulum"}
HIDE = {"class": "rlrun.envs.pomdp:HideVelocities"}
EVAL_EPISODES = 10
REPS = 2000  # bootstrap resamples of the probability of improvement

SB3_WORKER = (
    r'''
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize
from rlrun.envs.pomdp import HideVelocities

budget, seed, env_id, episodes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
zoo = json.loads(sys.argv[5])


def schedule(value):
    """The zoo's `lin_X`: X times the progress remaining (1 at the start, 0 at the budget)."""
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value[len("lin_"):])
        return lambda remaining: remaining * start
    return value


policy_kwargs = dict(zoo["policy_kwargs"], activation_fn=getattr(torch.nn, zoo["policy_kwargs"]["activation_fn"]))
env = make_vec_env(env_id, n_envs=zoo["n_envs"], seed=seed, wrapper_class=HideVelocities)
if zoo.get("normalize"):
    env = VecNormalize(env, gamma=zoo["gamma"])  # the zoo: normalize_kwargs gets the agent's gamma
settings = {key: zoo[key] for key in ("n_steps", "batch_size", "gae_lambda", "gamma", "n_epochs", "ent_coef",
                                      "use_sde", "sde_sample_freq") if key in zoo}
model = RecurrentPPO("MlpLstmPolicy", env, learning_rate=schedule(zoo["learning_rate"]),
                     clip_range=schedule(zoo["clip_range"]), policy_kwargs=policy_kwargs, seed=seed, device="cpu",
                     **settings)


'''
    + SB3_LEARN_TIMED
    + r"""
evaluation_env = make_vec_env(env_id, n_envs=1, seed=seed + 1000, wrapper_class=HideVelocities)
if zoo.get("normalize"):
    evaluation_env = VecNormalize(evaluation_env, training=False, norm_reward=False, gamma=zoo["gamma"])
    evaluation_env.obs_rms = env.obs_rms
returns, _ = evaluate_policy(model, evaluation_env, n_eval_episodes=episodes, deterministic=True,
                             return_episode_rewards=True)
print(json.dumps({"frames": model.num_timesteps, "fps": frames / wall, "cpu_fps": frames / cpu,
                  "mean": float(np.mean(returns)), "std": float(np.std(returns)), "episodes": len(returns),
                  "returns": [float(r) for r in returns]}))
"""
)

RLRUN_WORKER = r"""
import json, sys, tempfile, time
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.spec import load_spec
from rlrun.training import train

document, budget = json.loads(sys.argv[1]), int(sys.argv[2])
marks = []


def on_event(event):
    if isinstance(event, events.Progress) and (not marks or event.frame >= budget):
        marks.append((event.frame, time.perf_counter(), time.process_time()))


with tempfile.TemporaryDirectory() as home:
    train(load_spec(document), home=home, on_event=on_event)
    with Registry.open(home, create=False) as registry:
        evaluation = registry.get_run(registry.resolve("latest").id).evaluations[-1]
(f0, w0, c0), (f1, w1, c1) = marks[0], marks[-1]
print(json.dumps({"frames": f1, "fps": (f1 - f0) / (w1 - w0), "cpu_fps": (f1 - f0) / (c1 - c0),
                  "mean": evaluation.mean, "std": evaluation.std, "episodes": evaluation.episodes}))
"""


def rlrun_document(name: str, budget: int, seed: int, *, hide: bool, edits: list[str] | None = None) -> dict[str, Any]:
    """The built-in `name` (with `edits`, `--set` values) for one session of `budget` frames,
    evaluated once at its end (10 greedy episodes), with the velocities hidden when `hide` (the
    built-ins that hide them already do)."""
    from rlrun.spec import apply_overrides, builtin_document

    document = apply_overrides(builtin_document(name), edits or [])
    if hide:
        document["name"] = f"{name}_novel_memoryless"
        document["env"]["wrappers"] = [*(document["env"].get("wrappers") or []), HIDE]
    document["meta"] = {
        **document["meta"],
        "max_frame": budget,
        "eval_frequency": budget,
        "checkpoint_frequency": budget,
        "log_frequency": max(budget // 10, 1),
        "seed": seed,
        "sessions": 1,
        "num_eval_episodes": EVAL_EPISODES,
        "eval_deterministic": True,
    }
    return document


def run(worker: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", worker, *args], capture_output=True, text=True, env={**os.environ, **SINGLE_THREAD}
    )
    if done.returncode != 0:
        raise SystemExit(f"worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(side: str, task: str, budget: int, seed: int, edits: list[str] | None = None) -> dict[str, Any]:
    if side == "sb3":
        result = run(SB3_WORKER, str(budget), str(seed), ENV_IDS[task], str(EVAL_EPISODES), json.dumps(ZOO[task]))
    elif side == "rlrun":
        document = rlrun_document(BUILTINS[task], budget, seed, hide=False, edits=edits)
        result = run(RLRUN_WORKER, json.dumps(document), str(budget))
    else:
        result = run(RLRUN_WORKER, json.dumps(rlrun_document(MEMORYLESS[task], budget, seed, hide=True)), str(budget))
    return {"side": side, "task": task, "budget": budget, "seed": seed, **({"edits": edits} if edits else {}), **result}


LABELS = {"sb3": "sb3-contrib RecurrentPPO", "rlrun": "rlrun recurrent PPO", "memoryless": "rlrun PPO, no memory"}


def report(results: list[dict[str, Any]]) -> None:
    """Per task and budget: each side's final return per seed, their mean, frames per CPU-second
    (median over seeds) and its ratio to sb3-contrib's."""
    for task, budget in sorted({(r["task"], r["budget"]) for r in results}):
        rows = [r for r in results if r["task"] == task and r["budget"] == budget]
        seeds = sorted({r["seed"] for r in rows})
        speed = {
            side: statistics.median(r["cpu_fps"] for r in rows if r["side"] == side)
            for side in LABELS
            if any(r["side"] == side for r in rows)
        }
        lines = []
        for side, label in LABELS.items():
            mine = {r["seed"]: r for r in rows if r["side"] == side}
            if not mine:
                continue
            edits = sorted({" ".join(r.get("edits") or []) for r in mine.values()} - {""})
            label = f"{label} ({'; '.join(edits)})" if edits else label
            cells = "".join(f"{mine[s]['mean']:>10.1f}" if s in mine else f"{'-':>10}" for s in seeds)
            mean = statistics.fmean(r["mean"] for r in mine.values())
            ratio = f"{speed[side] / speed['sb3']:>7.2f}x" if "sb3" in speed else f"{'-':>8}"
            lines.append((label, f"{cells}{mean:>10.1f}{speed[side]:>10.0f}{ratio}"))
        width = max(len(label) for label, _ in lines) + 2
        print(f"\n{NAMES[task]}, {budget:,} frames: final return (10 deterministic episodes) per seed")
        print(
            f"{'side':<{width}}"
            + "".join(f"{'seed ' + str(s):>10}" for s in seeds)
            + f"{'mean':>10}{'f/cpu-s':>10}{'vs sb3':>8}"
        )
        for label, rest in lines:
            print(f"{label:<{width}}{rest}")
        print_improvement(rows, seeds)


def print_improvement(rows: list[dict[str, Any]], seeds: list[int]) -> None:
    """P(rlrun > sb3-contrib) over the seeds both sides have, as `rlrun compare` computes and reads it."""
    from rlrun.compare.comparison import verdict_of
    from rlrun.compare.statistics import improvements

    final = {side: {r["seed"]: r["mean"] for r in rows if r["side"] == side} for side in ("rlrun", "sb3")}
    both = [s for s in seeds if s in final["rlrun"] and s in final["sb3"]]
    if not both:
        return
    scores = [np.array([[final[side][s]] for s in both]) for side in ("rlrun", "sb3")]  # (seeds, 1 task)
    estimate = improvements({"rlrun > sb3": (scores[0], scores[1])}, reps=REPS, seed=0)["rlrun > sb3"]
    print(
        f"P(rlrun > sb3-contrib) {estimate.point:.2f} [{estimate.low:.2f}, {estimate.high:.2f}]"
        f" ({len(both)} seeds, 95% bootstrap): {verdict_of(estimate)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--frames", type=frames, help="every budget, e.g. 20k (default: the zoo's, 1e5)")
    parser.add_argument("--sides", nargs="+", default=list(LABELS), choices=list(LABELS))
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        dest="edits",
        help="change the rlrun built-in's spec (its row only), e.g. agent.n_steps=128",
    )
    parser.add_argument("--out", type=Path, help="append each result to this file as a JSON line")
    parser.add_argument("--report", nargs="+", type=Path, help="print the table from these files; train nothing")
    args = parser.parse_args()
    if args.report:
        report([json.loads(line) for path in args.report for line in path.read_text().splitlines() if line])
        return
    results = []
    for task in args.tasks:
        budget = args.frames or ZOO[task]["n_timesteps"]
        for seed in args.seeds:
            for side in args.sides:
                result = measure(side, task, budget, seed, args.edits if side == "rlrun" else None)
                print(json.dumps(result), flush=True)
                results.append(result)
                if args.out is not None:
                    with args.out.open("a") as out:
                        out.write(json.dumps(result) + "\n")
    report(results)


if __name__ == "__main__":
    main()
